#!/usr/bin/python3
"""PyTorch peer for the training benchmark: the same model, sizes, batch and optimizer as ctrbox,
on the same Criteo-layout TSV files (ctrbox-data gen output).

Categorical tokens are indexed per field from the training file (unseen -> a zero padding row,
as ctrbox reads zeros for unknown keys); integers are log1p(max(x, 0)) dense inputs; empty values
are missing (padding row / 0). Embeddings are one nn.Embedding updated by torch.optim.Adam, the
usual PyTorch setup. Only the training steps are timed (data is tensorized first).
Prints one JSON line: model, rows, train_seconds, samples_per_s (of the median of --repeat runs,
each training a fresh model from the seed; all runs' rates in runs_samples_per_s); writes label<TAB>prob lines of
the test file to --pred-out for `ctrbox eval --scores`. --device cuda runs it on the GPU (eager
mode, the whole model there), for bench/gpu.sh; DLRM is ctrbox's: a bottom MLP on the dense values
ending at --dim, dot products between it and the field embeddings, a top MLP on [bottom, dots].
"""
import argparse, json, math, sys, time

import numpy as np
import torch
from torch import nn


def read_tsv(path, vocab, grow):
    labels, dense, cats = [], [], []
    with open(path) as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            labels.append(float(c[0]))
            dense.append([math.log1p(max(float(x), 0.0)) if x else 0.0 for x in c[1:14]])
            row = []
            for j, tok in enumerate(c[14:40]):
                if not tok:
                    row.append(0)
                    continue
                key = (j, tok)
                idx = vocab.get(key)
                if idx is None:
                    if grow:
                        idx = vocab[key] = len(vocab) + 1
                    else:
                        idx = 0
                row.append(idx)
            cats.append(row)
    return (torch.tensor(labels, dtype=torch.float32), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(cats, dtype=torch.int64))


class Model(nn.Module):
    def __init__(self, kind, n_keys, dim, hidden, bottom=(), n_fields=26, n_dense=13):
        super().__init__()
        self.kind = kind
        if kind == "dlrm":
            self.emb = nn.Embedding(n_keys + 1, dim, padding_idx=0)
            nn.init.normal_(self.emb.weight, std=1e-2)
            with torch.no_grad():
                self.emb.weight[0].zero_()
            layers, d = [], n_dense
            for h in list(bottom[:-1]) + [dim]:
                layers += [nn.Linear(d, h), nn.ReLU()]
                d = h
            self.bot = nn.Sequential(*layers)
            nf = n_fields + 1
            self.tri = torch.tril_indices(nf, nf, offset=-1)
            layers, d = [], dim + nf * (nf - 1) // 2
            for h in hidden:
                layers += [nn.Linear(d, h), nn.ReLU()]
                d = h
            layers.append(nn.Linear(d, 1))
            self.top = nn.Sequential(*layers)
            self.bias = nn.Parameter(torch.zeros(1))
            return
        self.w = nn.Embedding(n_keys + 1, 1, padding_idx=0)
        nn.init.zeros_(self.w.weight)
        self.wide = nn.Linear(n_dense, 1)
        nn.init.zeros_(self.wide.weight)
        nn.init.zeros_(self.wide.bias)
        if kind != "lr":
            self.emb = nn.Embedding(n_keys + 1, dim, padding_idx=0)
            nn.init.normal_(self.emb.weight, std=1e-2)
            with torch.no_grad():
                self.emb.weight[0].zero_()
        if kind == "deepfm":
            layers, d = [], n_fields * dim + n_dense
            for h in hidden:
                layers += [nn.Linear(d, h), nn.ReLU()]
                d = h
            layers.append(nn.Linear(d, 1))
            self.mlp = nn.Sequential(*layers)

    def forward(self, dense, cats):
        if self.kind == "dlrm":
            b = self.bot(dense)                                  # (B, D)
            v = torch.cat([b.unsqueeze(1), self.emb(cats)], 1)   # (B, F+1, D)
            z = torch.bmm(v, v.transpose(1, 2))[:, self.tri[0], self.tri[1]]
            return self.top(torch.cat([b, z], 1)).squeeze(1) + self.bias
        logit = self.w(cats).sum(dim=(1, 2)) + self.wide(dense).squeeze(1)
        if self.kind == "lr":
            return logit
        e = self.emb(cats)                       # (B, F, D)
        s = e.sum(dim=1)
        logit = logit + 0.5 * (s * s - (e * e).sum(dim=1)).sum(dim=1)
        if self.kind == "deepfm":
            x = torch.cat([e.flatten(1), dense], dim=1)
            logit = logit + self.mlp(x).squeeze(1)
        return logit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["lr", "fm", "deepfm", "dlrm"])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--pred-out", required=True)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", default="400,400,400")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bottom", default="64,16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=1, help="train this many times; the median run's time counts")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    vocab = {}
    y, xd, xc = read_tsv(a.train, vocab, True)
    ty, txd, txc = read_tsv(a.test, vocab, False)
    y, xd, xc, txd, txc = y.to(dev), xd.to(dev), xc.to(dev), txd.to(dev), txc.to(dev)
    lossf = nn.BCEWithLogitsLoss()
    n = len(y)
    times = []
    for _ in range(a.repeat):   # each repeat trains a fresh model from the same seed
        torch.manual_seed(a.seed)
        m = Model(a.model, len(vocab), a.dim, [int(h) for h in a.hidden.split(",")],
                  [int(h) for h in a.bottom.split(",")]).to(dev)
        if a.model == "dlrm":
            m.tri = m.tri.to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=a.lr)
        t0 = time.perf_counter()
        for _ in range(a.epochs):
            for i in range(0, n, a.batch):
                opt.zero_grad()
                loss = lossf(m(xd[i:i + a.batch], xc[i:i + a.batch]), y[i:i + a.batch])
                loss.backward()
                opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = sorted(times)[len(times) // 2]   # the median run
    m.eval()
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(m(txd[i:i + 65536], txc[i:i + 65536])) for i in range(0, len(ty), 65536)]).cpu()
    with open(a.pred_out, "w") as f:
        for l, q in zip(ty.tolist(), p.tolist()):
            f.write(f"{int(l)}\t{q:.9g}\n")
    print(json.dumps({"model": a.model, "rows": n * a.epochs, "keys": len(vocab), "train_seconds": dt,
                      "samples_per_s": n * a.epochs / dt,
                      "runs_samples_per_s": [n * a.epochs / t for t in times], "torch": torch.__version__, "threads": a.threads, "device": a.device}))


if __name__ == "__main__":
    main()
