"""The busy spans of an nvidia-smi clock log, with their SM clock and power.

h200_session.sh samples the GPU four times a second into $OUT/clocks.csv
(nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,
clocks_throttle_reasons.active --format=csv -lms 250). A training run shows up
as a span of samples above an idle power; this prints each such span in
order, so the runs of a call (bb's benches, then the peers') can be matched to
them: start, length, mean / lowest / highest SM clock, mean power, and the
share of samples held back by the software power cap (clock event reason 0x4).

    python3 benchmarks/clock_segments.py OUT/clocks.csv [--busy-watts 400] [--min-samples 4]
"""
import argparse
import csv
import datetime
import os

SW_POWER_CAP = 0x4


def read_samples(path):
    """(time, sm clock MHz, power W, reasons) per row; rows that do not parse are skipped, a missing file
    (the sampler never started) has none."""
    samples = []
    if not os.path.exists(path):
        return samples
    with open(path, newline="") as f:
        for row in csv.reader(f):
            try:
                when = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                samples.append((when, int(row[1].split()[0]), float(row[2].split()[0]), int(row[4].strip(), 16)))
            except (ValueError, IndexError):
                continue
    return samples


def busy_spans(samples, busy_watts, min_samples):
    """Runs of consecutive samples above busy_watts, at least min_samples long."""
    spans, current = [], []
    for s in samples:
        if s[2] > busy_watts:
            current.append(s)
            continue
        if len(current) >= min_samples:
            spans.append(current)
        current = []
    if len(current) >= min_samples:
        spans.append(current)
    return spans


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--busy-watts", type=float, default=400.0, help="a sample above this power is busy")
    parser.add_argument("--min-samples", type=int, default=4, help="shorter busy runs are not listed")
    args = parser.parse_args()
    spans = busy_spans(read_samples(args.csv), args.busy_watts, args.min_samples)
    print(f"{len(spans)} busy spans (power above {args.busy_watts:.0f} W for {args.min_samples}+ samples):")
    for span in spans:
        clocks = [s[1] for s in span]
        powers = [s[2] for s in span]
        capped = sum(1 for s in span if s[3] & SW_POWER_CAP)
        seconds = (span[-1][0] - span[0][0]).total_seconds()
        print(f"  {span[0][0].time()}  {seconds:5.1f} s  sm clock {sum(clocks) / len(clocks):5.0f} MHz "
              f"({min(clocks)}-{max(clocks)})  power {sum(powers) / len(powers):4.0f} W  "
              f"power-capped {100 * capped / len(span):3.0f} %")


if __name__ == "__main__":
    main()
