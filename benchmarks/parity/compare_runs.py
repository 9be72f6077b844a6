"""Compares 50-step training runs (JSON files with per-step "losses" and "grad_norms") against a reference run.

  python benchmarks/parity/compare_runs.py [--loss-bound 0.02] REF_NAME=ref.json NAME=run.json [NAME=run.json ...]

Prints, for each run, the largest relative loss and grad-norm difference to the reference over all steps (and
the step where it falls), the number of steps whose grad norm is more than 5 % off, and the per-step grad-norm
differences in percent. bb-correctness output and benchmarks/parity/hf_bf16_reference.py output both qualify.
With --loss-bound B each run also gets PASS (relative loss difference <= B at every step, and as many steps as
the reference) or FAIL, and the exit status is 1 when any run fails.
"""

import json
import sys


def load(arg):
    name, path = arg.split("=", 1)
    with open(path) as f:
        return name, json.load(f)


def rel(a, b):
    return [abs(x - y) / abs(y) for x, y in zip(a, b)]


def main():
    args = sys.argv[1:]
    bound = None
    if args[:1] == ["--loss-bound"]:
        if len(args) < 2:
            raise SystemExit(__doc__)
        bound, args = float(args[1]), args[2:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    ref_name, ref = load(args[0])
    failed = False
    for arg in args[1:]:
        name, run = load(arg)
        dl, dg = rel(run["losses"], ref["losses"]), rel(run["grad_norms"], ref["grad_norms"])
        worst_l, worst_g = max(range(len(dl)), key=dl.__getitem__), max(range(len(dg)), key=dg.__getitem__)
        print(f"{name} vs {ref_name} over {len(dl)} steps: max loss diff {dl[worst_l]:.3%} (step {worst_l}), "
              f"max grad-norm diff {dg[worst_g]:.2%} (step {worst_g}), steps over 5 %: {sum(d > 0.05 for d in dg)}")
        print("  grad-norm diff per step (%):", " ".join(f"{100 * d:.1f}" for d in dg))
        if bound is not None:
            ok = len(dl) == len(ref["losses"]) and dl[worst_l] <= bound
            failed |= not ok
            print(f"  {'PASS' if ok else 'FAIL'}: loss within {bound:.1%} of {ref_name} at every step"
                  + ("" if len(dl) == len(ref["losses"]) else f" (only {len(dl)} of {len(ref['losses'])} steps)"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
