# Source this on a machine where the package is not installed (the GPU host): it makes
# `import attention_conformance` resolve to this checkout, as `pip install -e .` would, by a folder of
# links (conformance/'s files plus the oracles/, kernels/ and property_tests/ subpackages; the mapping of
# pyproject.toml's package-dir), and puts the folder first on PYTHONPATH.
#   . tools/checkout_env.sh && python3 -m attention_conformance list
_ac_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_ac_ns=$(mktemp -d /tmp/attention_conformance_path.XXXXXX)
mkdir "$_ac_ns/attention_conformance"
for _ac_f in "$_ac_root"/conformance/*; do ln -s "$_ac_f" "$_ac_ns/attention_conformance/"; done
for _ac_p in oracles kernels property_tests; do ln -s "$_ac_root/$_ac_p" "$_ac_ns/attention_conformance/$_ac_p"; done
# The distribution's metadata with the pytest plugin's entry point (pyproject.toml's pytest11), as pip install -e writes
# them: without it pytest on the GPU host ran without the plugin (its marks unknown; N xdist workers not sharing the
# cores, each with every core's BLAS and torch threads: the kernel device tests took ~20 s each under 8 workers on 16
# cores, their CPU oracle 0.2-1 s alone). Where the distribution is installed too, pytest loads the plugin once (pluggy
# skips a name registered before).
_ac_v=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$_ac_root/pyproject.toml" | head -1)
mkdir "$_ac_ns/attention_conformance-$_ac_v.dist-info"
printf 'Metadata-Version: 2.1\nName: attention-conformance\nVersion: %s\n' "$_ac_v" \
    > "$_ac_ns/attention_conformance-$_ac_v.dist-info/METADATA"
printf '[pytest11]\nattention_conformance = attention_conformance.pytest_plugin\n' \
    > "$_ac_ns/attention_conformance-$_ac_v.dist-info/entry_points.txt"
export PYTHONPATH="$_ac_ns${PYTHONPATH:+:$PYTHONPATH}"
unset _ac_root _ac_ns _ac_f _ac_p _ac_v
