#!/usr/bin/env python3
"""The SSD tier's curve as an SVG: samples/s over the in-memory rate against the cache's share of
the table (log scale), from bench_tier.sh's "curve" JSON on stdin, with Meta's published point
(embedding offloading to host DRAM, 0.74 of in-HBM speed at 37x oversubscription) and the 0.85
target, and under the title the machine it was measured on when given (the CPU: the curve differs
between CPUs). Usage: bench_tier.sh ... | tier_curve.py OUT.svg [MACHINE]"""
import json
import math
import sys

c = json.load(sys.stdin)["curve"]
pts = [(p["cache_pct"], p["ratio"]) for p in c["points"]]
W, H, L, R, T, B = 640, 400, 70, 20, 40, 60
def x(pct):
    return L + (math.log10(pct) - 0) / 2 * (W - L - R)
def y(r):
    return T + (1.2 - r) / 1.2 * (H - T - B)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">SSD tier: samples/s over in memory, DeepFM, '
       f'{c["rows"]:,} rows, table {c["table_bytes"] / 2**20:,.0f} MB</text>']
if len(sys.argv) > 2:
    machine = sys.argv[2].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out.append(f'<text x="{W / 2}" y="35" text-anchor="middle" font-size="11" fill="#444">{machine}</text>')
for pct in (1, 3, 10, 30, 100):
    out.append(f'<line x1="{x(pct):.1f}" y1="{T}" x2="{x(pct):.1f}" y2="{H - B}" stroke="#ddd"/>')
    out.append(f'<text x="{x(pct):.1f}" y="{H - B + 18}" text-anchor="middle">{pct}%</text>')
for r in (0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2):
    out.append(f'<line x1="{L}" y1="{y(r):.1f}" x2="{W - R}" y2="{y(r):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{L - 8}" y="{y(r) + 4:.1f}" text-anchor="end">{r:.1f}</text>')
out.append(f'<text x="{(L + W - R) / 2}" y="{H - 20}" text-anchor="middle">--cache-mb as a share of the table (log scale)</text>')
out.append(f'<text x="18" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 18 {(T + H - B) / 2})">'
           'samples/s over in memory</text>')
out.append(f'<line x1="{L}" y1="{y(0.85):.1f}" x2="{W - R}" y2="{y(0.85):.1f}" stroke="#c00" stroke-dasharray="6 4"/>')
# at the left end, above the line: the points' labels at the right may come near 0.85
out.append(f'<text x="{L + 6}" y="{y(0.85) - 6:.1f}" fill="#c00">target 0.85 at 10%</text>')
mx, my = x(100 / 37), y(0.74)
out.append(f'<rect x="{mx - 5:.1f}" y="{my - 5:.1f}" width="10" height="10" fill="none" stroke="#070" stroke-width="2"/>')
out.append(f'<text x="{mx + 10:.1f}" y="{my + 16:.1f}" fill="#070">Meta, host DRAM, 37x: 0.74</text>')
path = " ".join(f'{"M" if i == 0 else "L"}{x(p):.1f},{y(r):.1f}' for i, (p, r) in enumerate(pts))
out.append(f'<path d="{path}" fill="none" stroke="#036" stroke-width="2"/>')
for i, (p, r) in enumerate(pts):
    out.append(f'<circle cx="{x(p):.1f}" cy="{y(r):.1f}" r="4" fill="#036"/>')
    # the first point's label to its right, clear of the axis's tick labels
    anchor, dx = ("start", 6) if i == 0 else ("middle", 0)
    out.append(f'<text x="{x(p) + dx:.1f}" y="{y(r) - 9:.1f}" text-anchor="{anchor}">{r:.2f}</text>')
out.append('</svg>')
with open(sys.argv[1], "w") as f:
    f.write("\n".join(out) + "\n")
