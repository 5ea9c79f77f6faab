#!/bin/sh
# Forward mode (one fvar<double> pass per parameter) against the shard loop's reverse sweeps per row, on the
# logistic shard program (Stan's own bernoulli_logit, no fused kernel), N = 100,000, dim 10, CPU time of one
# thread. Run from the repository root: sh benchmarks/forward_mode_probe/run.sh [.venv]
set -e
VENV=${1:-.venv}
HS=$($VENV/bin/python -c "import httpstan, os; print(os.path.dirname(httpstan.__file__))")
DIR=benchmarks/forward_mode_probe
OUT=$(mktemp -d)
"$HS/stanc" --allow-undefined --o="$OUT/logit_shard.hpp" "$DIR/logit_shard.stan"
${CXX:-g++} -std=c++17 -O3 -pthread -DSTAN_THREADS -D_REENTRANT -DBOOST_DISABLE_ASSERTS -D_GLIBCXX_USE_CXX11_ABI=0 \
  -Wno-deprecated-declarations -Wno-ignored-attributes -isystem "$HS/include" -I "$DIR" -I stan_dp/stan/native -I "$OUT" \
  "$DIR/probe.cpp" -o "$OUT/probe" -L "$HS/lib" -Wl,-rpath,"$HS/lib" -ltbb
"$OUT/probe"
rm -rf "$OUT"
