#!/usr/bin/env bash
# make test-pythons: build the extension and run pytest on other Python versions.
#
#   scripts/test-pythons.sh VERSION... [-- PYTEST_ARGS...]
#
# For each VERSION (e.g. 3.10) the interpreter is looked up in $PYENV_ROOT/versions
# (`pyenv root`, else ~/.pyenv), then on PATH as pythonVERSION. Each version gets its own
# venv, .venv-VERSION, with the test extras installed (again only when pyproject.toml or
# setup.py change), and its own in-place build of pyserver/_core (the file names carry the
# version: pyserver/_core.cpython-310-*.so), so the versions and `make test`'s .venv do not
# disturb each other. Every version is run; the status is 1 if any of them failed. The
# time each one took is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	versions+=("$1")
	shift
done
[ "${1:-}" = "--" ] && shift
pytest_args=("$@")
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(tests)

pyenv_root=${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}

find_python() {
	local v=$1 candidate
	for candidate in $(ls -d "$pyenv_root/versions/$v".* 2>/dev/null | sort -V -r); do
		if [ -x "$candidate/bin/python$v" ]; then
			echo "$candidate/bin/python$v"
			return 0
		fi
	done
	command -v "python$v" 2>/dev/null
}

summary=()
status=0
for v in "${versions[@]}"; do
	start=$(date +%s)
	python=$(find_python "$v") || python=""
	if [ -z "$python" ]; then
		echo "test-pythons: no Python $v found (looked in $pyenv_root/versions and PATH)" >&2
		summary+=("$v: MISSING")
		status=1
		continue
	fi
	venv=.venv-$v
	py=$venv/bin/python
	pip=("$py" -m pip --disable-pip-version-check -q)
	echo "== Python $v: $python ($venv)"
	ok=1
	if [ ! -x "$py" ]; then
		"$python" -m venv "$venv" || ok=0
	fi
	if [ $ok = 1 ] && { [ ! -e "$venv/.deps-stamp" ] || [ pyproject.toml -nt "$venv/.deps-stamp" ] \
		|| [ setup.py -nt "$venv/.deps-stamp" ]; }; then
		{ "${pip[@]}" install --upgrade pip 'setuptools>=64' wheel \
			&& "${pip[@]}" install --no-build-isolation -e '.[test]' \
			&& touch "$venv/.deps-stamp"; } || ok=0
	fi
	if [ $ok = 1 ]; then
		"$py" setup.py -q build_ext --inplace --force >"$venv/build.log" 2>&1 \
			|| { tail -30 "$venv/build.log"; ok=0; }
	fi
	result=FAILED
	if [ $ok = 1 ]; then
		"$py" -m pytest -q -p no:cacheprovider "${pytest_args[@]}" && result=passed
	fi
	[ $result = passed ] || status=1
	summary+=("$v: $result in $(($(date +%s) - start)) s")
done

echo "== test-pythons (pytest ${pytest_args[*]})"
printf '   %s\n' "${summary[@]}"
exit $status
