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
export PYTHONPATH="$_ac_ns${PYTHONPATH:+:$PYTHONPATH}"
unset _ac_root _ac_ns _ac_f _ac_p
