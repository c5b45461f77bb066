"""Write the synthetic data fixtures (real schemas, real quirks) used by tests, benchmarks and the CPU demo.

    python scripts/make_fixtures.py --out-dir /tmp/fixtures            # small DAPO file + every math set
    python scripts/make_fixtures.py --out-dir /tmp/fixtures --full-size  # 1,791,700-row DAPO file as well

The generators live in ``data_preprocess.fixtures`` (importable); this is their command line.
"""

from __future__ import annotations

import argparse
import os
import time

from data_preprocess.fixtures import MATH_SET_NAMES, make_dapo17k, make_math_set


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--full-size", action="store_true", help="also write dapo17k_full.parquet (1.79M rows)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = os.path.expanduser(args.out_dir)

    facts = make_dapo17k(os.path.join(out, "dapo17k_small.parquet"), seed=args.seed)
    print(f"dapo17k_small.parquet: {facts}")
    if args.full_size:
        start = time.perf_counter()
        facts = make_dapo17k(os.path.join(out, "dapo17k_full.parquet"), seed=args.seed, full_size=True)
        print(f"dapo17k_full.parquet: {facts} ({time.perf_counter() - start:.1f} s)")
    for name in MATH_SET_NAMES:
        n = make_math_set(name, os.path.join(out, f"{name}.parquet"), seed=args.seed)
        print(f"{name}.parquet: {n} rows")


if __name__ == "__main__":
    main()
