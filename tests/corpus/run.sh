#!/usr/bin/env bash
# The whole sqllogictest corpus, differentially: tablegate against a
# throwaway PostgreSQL 15 cluster, through the same runner as the CI subset
# (tests/e2e/corpus.rs). Prints the records, agreements, skips and
# differences per file, then the differences per class with an example each,
# and writes every difference to a TSV file.
#
#   tests/corpus/run.sh                        # the whole corpus
#   tests/corpus/run.sh sqlite/select1.test:300 datafusion/joins.slt
#                                              # some files (:N, first N records)
#
# SQLite's select1-5.test are not in the repository: point
# TABLEGATE_CORPUS_SQLITE at a directory holding them (default:
# ../shared/sqllogictest beside the repository); see README.md here.
# Environment: TABLEGATE_CORPUS_TIMEOUT (seconds per record, default 30),
# TABLEGATE_CORPUS_OUT (the TSV, default target/corpus-differences.tsv),
# CARGO_TARGET_DIR as usual. Needs what the e2e tests need (PostgreSQL 15
# binaries, the postgres system user): .ci/run installs them.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -gt 0 ]; then
  TABLEGATE_CORPUS_FILES=$(IFS=,; echo "$*")
  export TABLEGATE_CORPUS_FILES
else
  export TABLEGATE_CORPUS=all
fi
target=${CARGO_TARGET_DIR:-target}
export TABLEGATE_CORPUS_OUT=${TABLEGATE_CORPUS_OUT:-$PWD/$target/corpus-differences.tsv}
mkdir -p "$(dirname "$TABLEGATE_CORPUS_OUT")"
# --workspace: the root package alone would resolve other features and
# rebuild DataFusion.
cargo test --workspace --test e2e corpus::sqllogictest_against_postgresql -- --exact --nocapture
