#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), growing the corpora
# in fuzz/corpus/<target> (kept between runs, not committed) from the
# committed seeds in fuzz/seeds/<target>. A crash stops its target and
# leaves the input in fuzz/artifacts/<target>/; the script then exits 1.
#   fuzz/run.sh 3600          # an hour per target
#   FUZZ_TARGETS=sql fuzz/run.sh 600
#   FUZZ_DEV=1 fuzz/run.sh 12   # CI's smoke run: an unoptimized build
# Needs the nightly toolchain and cargo-fuzz (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
targets="${FUZZ_TARGETS:-sql stored_bytes copy frontend}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
# Address sanitizer off: the code is safe Rust (unsafe_code = forbid), and
# without it a build takes minutes less and runs several times faster.
# Panics, overflows of the stack and arithmetic are what the targets find.
flags=(--sanitizer none --debug-assertions)
# FUZZ_DEV=1 builds without optimizations: a few minutes less to build, ten
# times fewer runs a second; enough for CI's smoke run of a few seconds.
[ "${FUZZ_DEV:-}" = 1 ] && flags+=(--dev)
cargo +nightly fuzz build "${flags[@]}"
failed=0
for t in $targets; do
  mkdir -p "corpus/$t"
  cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
  echo "== $t: ${seconds}s"
  if ! cargo +nightly fuzz run "${flags[@]}" "$t" "corpus/$t" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 2>"corpus/$t.log"; then
    failed=1
    tail -40 "corpus/$t.log"
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs" "corpus/$t.log" || true
  echo "corpus: $(ls "corpus/$t" | wc -l) inputs"
done
exit $failed
