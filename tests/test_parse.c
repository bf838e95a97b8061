/*
 * test_parse.c: each text parser on good rows, on every kind of bad row, CRLF, and the key rule.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/parse.h"

static line_parser *make(data_format fmt, num_mode num, const char *schema, const uint64_t *offs, int n_offs)
{
    parser_opts o = { fmt, num, schema, offs, n_offs };
    line_parser *p;
    char err[256];
    cr_assert_eq(parser_create(&p, &o, err, sizeof err), 0, "%s", err);
    return p;
}

static int parse(line_parser *p, const char *line, sample_block *b)
{
    return parser_parse(p, line, strlen(line), b);
}

static const char *criteo_row =
    "1\t5\t-1\t\t3\t260\t\t0\t1\t2\t3\t4\t5\t6"
    "\t05db9164\t08d6d899\t9143c832\tf56b7dd5\t25c83c98\t7e0ccccf\tdf5c2d18\t0b153874\ta73ee510"
    "\t8f48ce11\ta7b606c4\tae1bb660\teae197fd\tb28479f6\tbfef54b3\tbad5ee18\te5ba7672\t87c6f83c"
    "\t\t\t0429f84b\t\t3a171ecb\tc0d61a5c\t\t";

Test(parse, criteo_log_mode)
{
    line_parser *p = make(FMT_CRITEO, NUM_LOG, NULL, NULL, 0);
    const data_schema *s = parser_schema(p);
    cr_assert_eq(s->n_fields, 39);
    cr_assert_eq(s->n_dense, 13);
    sample_block b;
    block_init(&b, s->n_dense);
    cr_assert_eq(parse(p, criteo_row, &b), BAD_OK, "%s", parser_detail(p));
    cr_assert_eq(b.rows, 1);
    cr_assert_eq(b.label[0], 1.0f);
    cr_assert_float_eq(b.dense[0], log1pf(5), 1e-6);
    cr_assert_float_eq(b.dense[1], 0, 1e-9);          /* -1 -> max(x,0) = 0 */
    cr_assert_float_eq(b.dense[2], 0, 1e-9);          /* missing */
    cr_assert_float_eq(b.dense[4], log1pf(260), 1e-5);
    cr_assert_eq(b.nnz, 26 - 5);                      /* five empty categorical columns */
    cr_assert_eq(b.field[0], 13);
    cr_assert_eq(b.key[0], XXH3_64bits_withSeed("05db9164", 8, 13));
    cr_assert_eq(b.key[1], XXH3_64bits_withSeed("08d6d899", 8, 14));
    block_free(&b);
    parser_destroy(p);
}

Test(parse, criteo_bucket_mode)
{
    line_parser *p = make(FMT_CRITEO, NUM_BUCKET, NULL, NULL, 0);
    sample_block b;
    block_init(&b, parser_schema(p)->n_dense);
    cr_assert_eq(parser_schema(p)->n_dense, 0);
    cr_assert_eq(parse(p, criteo_row, &b), BAD_OK, "%s", parser_detail(p));
    /* 11 present integers become tokens: I1=5 -> floor(ln(5)^2) = 2, I2=-1 -> "-1", I5=260 -> 30 */
    cr_assert_eq(b.nnz, 11 + 21);
    cr_assert_eq(b.field[0], 0);
    cr_assert_eq(b.key[0], XXH3_64bits_withSeed("2", 1, 0));
    cr_assert_eq(b.key[1], XXH3_64bits_withSeed("-1", 2, 1));
    cr_assert_eq(b.key[3], XXH3_64bits_withSeed("30", 2, 4));
    cr_assert_eq(parse_num_bucket(2), 2);
    cr_assert_eq(parse_num_bucket(1.5), 1);
    cr_assert_eq(parse_num_bucket(1000), (int64_t)floor(log(1000) * log(1000)));
    block_free(&b);
    parser_destroy(p);
}

Test(parse, same_token_two_fields_two_keys)
{
    cr_assert_neq(parse_feature_key("abc", 3, 1), parse_feature_key("abc", 3, 2));
    cr_assert_eq(parse_feature_key("abc", 3, 1), XXH3_64bits_withSeed("abc", 3, 1));
}

/* Each bad row and the reason it must get. */
typedef struct {
    data_format fmt;
    const char *line;
    int reason;
} bad_case;

Test(parse, bad_rows)
{
    char crit_short[512], crit_long[512], crit_num[512], crit_label[512], crit_utf8[512];
    snprintf(crit_short, sizeof crit_short, "%.*s", (int)(strrchr(criteo_row, '\t') - criteo_row), criteo_row);
    snprintf(crit_long, sizeof crit_long, "%s\textra", criteo_row);
    snprintf(crit_num, sizeof crit_num, "1\tx5%s", strchr(criteo_row + 2, '\t'));
    snprintf(crit_label, sizeof crit_label, "2%s", criteo_row + 1);
    snprintf(crit_utf8, sizeof crit_utf8, "%s", criteo_row);
    crit_utf8[strlen(crit_utf8) - 2] = (char)0xc3;   /* a lead byte with no continuation */
    bad_case cases[] = {
        { FMT_CRITEO, crit_short, BAD_COLUMNS },
        { FMT_CRITEO, crit_long, BAD_COLUMNS },
        { FMT_CRITEO, crit_num, BAD_NUMBER },
        { FMT_CRITEO, crit_label, BAD_LABEL },
        { FMT_CRITEO, crit_utf8, BAD_UTF8 },
        { FMT_CRITEO, "", BAD_COLUMNS },
        { FMT_LIBSVM, "1 3:1 x:1", BAD_FEATURE },
        { FMT_LIBSVM, "1 3", BAD_FEATURE },
        { FMT_LIBSVM, "1 3:abc", BAD_NUMBER },
        { FMT_LIBSVM, "1 3:nan", BAD_NUMBER },
        { FMT_LIBSVM, "2 3:1", BAD_LABEL },
        { FMT_LIBSVM, "yes 3:1", BAD_LABEL },
        { FMT_LIBSVM, "", BAD_COLUMNS },
        { FMT_LIBSVM, "   ", BAD_COLUMNS },
        { FMT_LIBFFM, "1 0:3", BAD_FEATURE },
        { FMT_LIBFFM, "1 a:3:1", BAD_FEATURE },
        { FMT_LIBFFM, "1 70000:3:1", BAD_FIELD },
        { FMT_LIBFFM, "1 1:3:z", BAD_NUMBER },
        { FMT_LIBFFM, "1 1::1", BAD_FEATURE },
        { FMT_LIBFFM, "0.5 1:3:1", BAD_LABEL },
        { FMT_LIBFFM, "1 1:\xff\xfe:1", BAD_UTF8 },
        { FMT_LIBFFM, "1 1:\xed\xa0\x80:1", BAD_UTF8 },   /* a UTF-16 surrogate */
        { FMT_LIBFFM, "1 1:\xc0\xaf:1", BAD_UTF8 },       /* overlong encoding */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        line_parser *p = make(cases[i].fmt, NUM_LOG, NULL, NULL, 0);
        sample_block b;
        block_init(&b, parser_schema(p)->n_dense);
        const char *good = cases[i].fmt == FMT_CRITEO ? criteo_row : cases[i].fmt == FMT_LIBFFM ? "1 0:5:1" : "1 5:1";
        cr_assert_eq(parse(p, good, &b), BAD_OK, "%s", parser_detail(p));
        size_t rows = b.rows, nnz = b.nnz;
        int r = parse(p, cases[i].line, &b);
        cr_assert_eq(r, cases[i].reason, "case %zu '%s': got %s (%s), want %s", i, cases[i].line,
                     parse_bad_reason_key(r), parser_detail(p), parse_bad_reason_key(cases[i].reason));
        cr_assert_eq(b.rows, rows, "case %zu: a bad row must not be added", i);
        cr_assert_eq(b.nnz, nnz, "case %zu: a bad row must leave no keys", i);
        cr_assert(strlen(parser_detail(p)) > 0);
        block_free(&b);
        parser_destroy(p);
    }
}

Test(parse, nul_byte)
{
    line_parser *p = make(FMT_LIBSVM, NUM_LOG, NULL, NULL, 0);
    sample_block b;
    block_init(&b, 0);
    const char line[] = "1 3:1 4\0:1";
    cr_assert_eq(parser_parse(p, line, sizeof line - 1, &b), BAD_NUL);
    cr_assert_eq(b.rows, 0);
    block_free(&b);
    parser_destroy(p);
}

Test(parse, libsvm_offsets_and_labels)
{
    uint64_t offs[] = { 0, 957, 5039 };
    line_parser *p = make(FMT_LIBSVM, NUM_LOG, NULL, offs, 3);
    sample_block b;
    block_init(&b, 0);
    cr_assert_eq(parse(p, "-1 166:1 3431:0.5 5041:1", &b), BAD_OK);
    cr_assert_eq(parse(p, "+1 0:1", &b), BAD_OK);
    cr_assert_eq(parse(p, "1.0 956:1 957:2", &b), BAD_OK);
    cr_assert_eq(b.rows, 3);
    cr_assert_eq(b.label[0], 0.0f);
    cr_assert_eq(b.label[1], 1.0f);
    cr_assert_eq(b.label[2], 1.0f);
    cr_assert_eq(b.field[0], 0);
    cr_assert_eq(b.field[1], 1);
    cr_assert_eq(b.field[2], 2);
    cr_assert_eq(b.key[1], XXH3_64bits_withSeed("3431", 4, 1));
    cr_assert_float_eq(b.val[1], 0.5f, 1e-9);
    cr_assert_eq(b.field[4], 0);
    cr_assert_eq(b.field[5], 1);
    cr_assert_eq(b.row_ptr[3], 6);
    /* a value beyond a float (it became inf: the loss nan at the first step, "lower --lr") */
    cr_assert_eq(parse(p, "1 3:1e39", &b), BAD_NUMBER);
    cr_assert(strstr(parser_detail(p), "beyond a 32-bit float's range"), "%s", parser_detail(p));
    cr_assert_eq(parse(p, "1 3:-3.4e38", &b), BAD_OK);
    cr_assert_eq(b.rows, 4);
    block_free(&b);
    parser_destroy(p);

    /* no offsets: one field; offsets must ascend */
    p = make(FMT_LIBSVM, NUM_LOG, NULL, NULL, 0);
    cr_assert_eq(parser_schema(p)->n_fields, 1);
    parser_destroy(p);
    uint64_t bad_offs[] = { 0, 10, 10 };
    parser_opts o = { FMT_LIBSVM, NUM_LOG, NULL, bad_offs, 3 };
    char err[256];
    cr_assert_lt(parser_create(&p, &o, err, sizeof err), 0);
}

Test(parse, libffm_fields_grow)
{
    line_parser *p = make(FMT_LIBFFM, NUM_LOG, NULL, NULL, 0);
    sample_block b;
    block_init(&b, 0);
    cr_assert_eq(parse(p, "1 0:12:1 3:ab:0.25  7:9:1", &b), BAD_OK, "%s", parser_detail(p));
    cr_assert_eq(parser_schema(p)->n_fields, 8);
    cr_assert_eq(b.nnz, 3);
    cr_assert_eq(b.key[1], XXH3_64bits_withSeed("ab", 2, 3));
    cr_assert_float_eq(b.val[1], 0.25f, 1e-9);
    block_free(&b);
    parser_destroy(p);
}

Test(parse, csv_schema_roles_and_quotes)
{
    line_parser *p = make(FMT_CSV, NUM_LOG, "Id:skip,I1-I2:num,Label:label", NULL, 0);
    char err[256];
    const char *hdr = "Id,Label,I1,I2,C1,C2";
    cr_assert_eq(parser_header(p, hdr, strlen(hdr), err, sizeof err), 0, "%s", err);
    const data_schema *s = parser_schema(p);
    cr_assert_eq(s->n_fields, 4);
    cr_assert_eq(s->n_dense, 2);
    cr_assert_str_eq(s->names[2], "C1");
    cr_assert_eq(s->kind[0], FIELD_NUM);
    sample_block b;
    block_init(&b, s->n_dense);
    cr_assert_eq(parse(p, "17,1,260.0,,\"a,\"\"b\",x", &b), BAD_OK, "%s", parser_detail(p));
    cr_assert_float_eq(b.dense[0], log1pf(260), 1e-5);
    cr_assert_eq(b.nnz, 2);
    cr_assert_eq(b.key[0], XXH3_64bits_withSeed("a,\"b", 4, 2));
    cr_assert_eq(b.key[1], XXH3_64bits_withSeed("x", 1, 3));
    cr_assert_eq(parse(p, "17,1,2,3,x", &b), BAD_COLUMNS);
    cr_assert_eq(parse(p, "17,1,2,3,x,y,z", &b), BAD_COLUMNS);
    cr_assert_eq(parse(p, "17,1,2,3,\"x,y", &b), BAD_COLUMNS);
    /* a quoted field that went on past a line break (RFC 4180 allows it; rows here are lines) */
    cr_assert(strstr(parser_detail(p), "unterminated quote in column 5 (a row is one line"), "%s", parser_detail(p));
    cr_assert_eq(parse(p, "17,1,abc,3,x,y", &b), BAD_NUMBER);
    cr_assert_eq(parse(p, "17,3,1,3,x,y", &b), BAD_LABEL);
    cr_assert_eq(b.rows, 1);
    /* a later file's header must match */
    cr_assert_eq(parser_header(p, hdr, strlen(hdr), err, sizeof err), 0);
    cr_assert_lt(parser_header(p, "Id,Label", 8, err, sizeof err), 0);
    block_free(&b);
    parser_destroy(p);
}

Test(parse, csv_header_errors)
{
    const char *specs[] = { "nope:num", "I1:bogus", "I1-I9:num", "justaname", NULL };
    const char *hdr = "label,I1,I2";
    for (int i = 0; i < 5; i++) {
        line_parser *p = make(FMT_CSV, NUM_LOG, specs[i], NULL, 0);
        char err[256] = "";
        int want_fail = specs[i] != NULL;
        int r = parser_header(p, hdr, strlen(hdr), err, sizeof err);
        cr_assert_eq(r < 0, want_fail, "spec %s: %s", specs[i] ? specs[i] : "(none)", err);
        if (want_fail) cr_assert(strlen(err) > 0);
        parser_destroy(p);
    }
    line_parser *p = make(FMT_CSV, NUM_LOG, NULL, NULL, 0);
    char err[256];
    cr_assert_lt(parser_header(p, "a,b,c", 5, err, sizeof err), 0, "no label column is an error");
    cr_assert(strstr(err, "label") != NULL);
    parser_destroy(p);
    p = make(FMT_CSV, NUM_LOG, NULL, NULL, 0);
    cr_assert_eq(parser_header(p, "id,click,x", 10, err, sizeof err), 0, "click is a label name");
    parser_destroy(p);
    /* quoted names as the rows' fields are read: a comma and "" inside quotes ("pos,x" was two
     * columns, so every row was one column short: all bad lines) */
    p = make(FMT_CSV, NUM_LOG, NULL, NULL, 0);
    const char *quoted = "\"pos,x\",label,\"say \"\"hi\"\"\",plain";
    cr_assert_eq(parser_header(p, quoted, strlen(quoted), err, sizeof err), 0, "%s", err);
    const data_schema *sc = parser_schema(p);
    cr_assert(sc->n_fields == 3 && !strcmp(sc->names[0], "pos,x") && !strcmp(sc->names[1], "say \"hi\"") &&
              !strcmp(sc->names[2], "plain"));
    sample_block b;
    block_init(&b, 0);
    cr_assert_eq(parse(p, "\"a,b\",1,q,r", &b), BAD_OK, "%s", parser_detail(p));
    block_free(&b);
    cr_assert_eq(parser_header(p, quoted, strlen(quoted), err, sizeof err), 0, "a later file, the same header: %s", err);
    parser_destroy(p);
    p = make(FMT_CSV, NUM_LOG, NULL, NULL, 0);
    cr_assert_lt(parser_header(p, "label,\"open", 11, err, sizeof err), 0);
    cr_assert(strstr(err, "quote that does not end (column 2)"), "%s", err);
    parser_destroy(p);
}

Test(parse, numbers)
{
    double v;
    cr_assert_eq(parse_number("-12", 3, &v), 0);
    cr_assert_eq(v, -12);
    cr_assert_eq(parse_number("1e3", 3, &v), 0);
    cr_assert_eq(v, 1000);
    cr_assert_eq(parse_number("0x10", 4, &v), -1);
    cr_assert_eq(parse_number("inf", 3, &v), -1);
    cr_assert_eq(parse_number("", 0, &v), -1);
    cr_assert_eq(parse_number("-", 1, &v), -1);
    cr_assert_eq(parse_number("1e999", 5, &v), -1);
}

/* Scoring reads lines without labels; each gives the row its labeled twin gives, label NaN. */
Test(parse, unlabeled_lines_for_scoring)
{
    struct {
        data_format fmt;
        const char *labeled, *unlabeled;
    } cases[] = {
        { FMT_CRITEO, NULL, NULL },   /* criteo_row and the same without its first column */
        { FMT_LIBSVM, "1 3:1 17:0.5 99:2", "3:1 17:0.5 99:2" },
        { FMT_LIBFFM, "0 0:3:1 1:17:0.5 2:99:2", "0:3:1 1:17:0.5 2:99:2" },
    };
    cases[0].labeled = criteo_row;
    cases[0].unlabeled = strchr(criteo_row, '\t') + 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        parser_opts o = { cases[i].fmt, NUM_LOG, NULL, NULL, 0, 1, NULL };
        line_parser *p;
        char err[256];
        cr_assert_eq(parser_create(&p, &o, err, sizeof err), 0, "%s", err);
        sample_block b;
        block_init(&b, parser_schema(p)->n_dense);
        cr_assert_eq(parse(p, cases[i].labeled, &b), BAD_OK, "%s", parser_detail(p));
        cr_assert_eq(parse(p, cases[i].unlabeled, &b), BAD_OK, "%s", parser_detail(p));
        cr_assert_eq(b.rows, 2);
        cr_assert(!isnan(b.label[0]) && isnan(b.label[1]), "format %d", cases[i].fmt);
        size_t n0 = b.row_ptr[1], n1 = b.row_ptr[2] - b.row_ptr[1];
        cr_assert_eq(n0, n1);
        cr_assert(!memcmp(b.key, b.key + n0, n0 * sizeof *b.key) && !memcmp(b.val, b.val + n0, n0 * sizeof *b.val));
        if (b.n_dense) cr_assert(!memcmp(b.dense, b.dense + b.n_dense, b.n_dense * sizeof *b.dense));
        block_free(&b);
        parser_destroy(p);
    }
    /* where labels are wanted, a 39-column criteo line says what it is */
    line_parser *p = make(FMT_CRITEO, NUM_LOG, NULL, NULL, 0);
    sample_block b;
    block_init(&b, parser_schema(p)->n_dense);
    cr_assert_eq(parse(p, cases[0].unlabeled, &b), BAD_COLUMNS);
    cr_assert(strstr(parser_detail(p), "without its label"), "%s", parser_detail(p));
    cr_assert_eq(b.rows, 0);
    block_free(&b);
    parser_destroy(p);
}

/* csv for scoring: no label column, and --id-column's values become the rows' ids. */
Test(parse, csv_without_label_and_with_ids)
{
    parser_opts o = { FMT_CSV, NUM_LOG, "click:label,n:num", NULL, 0, 1, "id" };
    line_parser *p;
    char err[256];
    cr_assert_eq(parser_create(&p, &o, err, sizeof err), 0, "%s", err);
    const char *hdr = "id,a,n";
    cr_assert_eq(parser_header(p, hdr, strlen(hdr), err, sizeof err), 0, "%s", err);
    cr_assert_eq(parser_schema(p)->n_fields, 2, "a and n: the id is no feature");
    sample_block b;
    block_init(&b, parser_schema(p)->n_dense);
    cr_assert_eq(parse(p, "r1,x,2", &b), BAD_OK, "%s", parser_detail(p));
    cr_assert_eq(parse(p, "\"r,2\",y,3", &b), BAD_OK, "%s", parser_detail(p));
    cr_assert_eq(b.rows, 2);
    cr_assert(isnan(b.label[0]) && isnan(b.label[1]));
    cr_assert_eq(b.id_ptr[1], 2);
    cr_assert(!memcmp(b.ids, "r1r,2", 5));
    sample_block c;
    block_init(&c, b.n_dense);
    block_append(&c, &b, 1, 2);
    cr_assert(c.id_ptr && c.id_ptr[1] == 3 && !memcmp(c.ids, "r,2", 3), "ids travel with their rows");
    block_free(&c);
    block_free(&b);
    parser_destroy(p);
    /* an id column the header lacks is named */
    cr_assert_eq(parser_create(&p, &o, err, sizeof err), 0, "%s", err);
    const char *hdr2 = "a,n";
    cr_assert_neq(parser_header(p, hdr2, strlen(hdr2), err, sizeof err), 0);
    cr_assert(strstr(err, "--id-column id"), "%s", err);
    parser_destroy(p);
}
