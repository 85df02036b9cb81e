#!/usr/bin/env python3
"""How far data-parallel GPT-2-124M scales: p machines on 1, 10 and 25 GbE, from one machine's measurements.

  bench/data_parallel_model.py --compute 4.0 --backward-share 0.67
  bench/data_parallel_model.py --compute 4.0 --markdown        # the tables of docs/DISTRIBUTED.md

Inputs (bench/data_parallel.sh measures them): the time of forward + backward of one machine's batch
(--compute, seconds), the share of it that is backward (--backward-share), the parameters (--params).

The model, per optimizer step, with K micro-batches of accumulation:
  gradient bytes G = 4 · params (fp32 on the wire) or 2 · params (bf16)
  a ring all-reduce sends 2(p−1)/p · G per rank, in 2(p−1) messages per bucket:
      T_comm = 2(p−1)/p · G / (link · 0.9) + 2(p−1) · buckets · latency
  buckets start as backward finishes their layers, so communication hides behind the rest of the last
  micro-batch's backward, except the gradients that are final only when backward ends (GPT-2's token and
  position embeddings, 31% of the parameters, lie first in the buffer and are differentiated last):
      exposed = max(T_comm − backward, final_share · T_comm)
  efficiency = K · compute / (K · compute + exposed)
Not modelled: the optimizer (the same on every machine without ZeRO-1; 1/p of it with ZeRO-1), stragglers,
and links shared with other traffic. The 0.9 is TCP's usual share of the line rate.
"""
import argparse

LINKS = {"1 GbE": 125e6, "10 GbE": 1.25e9, "25 GbE": 3.125e9}


def efficiency(p, link, args, bf16=False, accumulation=1):
    grad_bytes = args.params * (2 if bf16 else 4)
    buckets = max(1, grad_bytes / (args.bucket_mb * 1e6 * (0.5 if bf16 else 1)))
    comm = 2 * (p - 1) / p * grad_bytes / (link * 0.9) + 2 * (p - 1) * buckets * args.latency
    backward = args.compute * args.backward_share
    exposed = max(comm - backward, args.final_share * comm)
    work = accumulation * args.compute
    return work / (work + exposed), comm, exposed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compute", type=float, required=True, help="forward + backward of one machine's batch, s")
    parser.add_argument("--backward-share", type=float, default=0.67)
    parser.add_argument("--params", type=float, default=124.44e6, help="GPT-2-124M with tied embeddings")
    parser.add_argument("--final-share", type=float, default=0.314,
                        help="gradients final only at backward's end: GPT-2's embeddings, (50257 + 1024)·768 / 124.44M")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--latency", type=float, default=50e-6, help="per message, s (TCP on Ethernet)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    machines = (4, 16, 64)
    cases = [("fp32", False, 1), ("bf16", True, 1), ("fp32, 4 micro-batches", False, 4),
             ("bf16, 4 micro-batches", True, 4)]
    if args.markdown:
        print("| gradients | link | " + " | ".join(f"{p} machines" for p in machines) + " |")
        print("|---|---|" + "---|" * len(machines))
    for name, bf16, k in cases:
        for link_name, link in LINKS.items():
            cells = []
            for p in machines:
                e, comm, exposed = efficiency(p, link, args, bf16, k)
                cells.append(f"{e:.0%}" + (" ✓" if e >= 0.8 else "") if args.markdown
                             else f"{e:5.0%} (comm {comm:5.2f} s, exposed {exposed:5.2f} s)")
            if args.markdown:
                print(f"| {name} | {link_name} | " + " | ".join(cells) + " |")
            else:
                print(f"{name:22s} {link_name:7s} " + "  ".join(f"p={p}: {c}" for p, c in zip(machines, cells)))
    # The slowest link with ≥ 80% at each p, by bisection on the link speed.
    print()
    for name, bf16, k in cases:
        needs = []
        for p in machines:
            lo, hi = 1e6, 1e12
            for _ in range(60):
                mid = (lo * hi) ** 0.5
                lo, hi = (lo, mid) if efficiency(p, mid, args, bf16, k)[0] >= 0.8 else (mid, hi)
            needs.append(f"p={p}: {hi * 8 / 1e9:.1f} Gb/s")
        print(f"80% needs, {name}: " + ", ".join(needs))


if __name__ == "__main__":
    main()
