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
# disturb each other.
#
# The versions run side by side: first every venv is prepared (pip, the extension build) at
# once, then every pytest run at once, TEST_PYTHONS_JOBS at a time (default: all of them).
# Most of a run is spent waiting on servers and sockets, not on the CPU. Each step's output goes to .venv-VERSION/*.log
# and is printed when the step ends, one version after another. Every version is run; the
# status is 1 if any of them failed. How long each version took from the start to the end
# of its tests, and the whole, are printed at the end.
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
jobs=${TEST_PYTHONS_JOBS:-${#versions[@]}}

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

# The venv of version $1 with the test extras and a fresh extension, made with $2.
prepare() {
	local v=$1 python=$2 venv=.venv-$1
	local py=$venv/bin/python
	local pip=("$py" -m pip --disable-pip-version-check -q)
	if [ ! -x "$py" ]; then
		"$python" -m venv "$venv" || return 1
	fi
	if [ ! -e "$venv/.deps-stamp" ] || [ pyproject.toml -nt "$venv/.deps-stamp" ] \
		|| [ setup.py -nt "$venv/.deps-stamp" ]; then
		{ "${pip[@]}" install --upgrade pip 'setuptools>=64' wheel \
			&& "${pip[@]}" install --no-build-isolation -e '.[test]' \
			&& touch "$venv/.deps-stamp"; } || return 1
	fi
	"$py" setup.py -q build_ext --inplace --force
}

# Runs "$@" for every version in $pending (a version per word) in the background, at most
# $jobs at a time, its output in .venv-VERSION/$log; leaves the versions whose command
# failed in $failed. "$@" gets the version appended.
run_all() {
	local log=$1 v
	shift
	local -A pids=()
	for v in $pending; do
		while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
			wait -n 2>/dev/null || true
		done
		mkdir -p ".venv-$v"
		{ "$@" "$v"; rc=$?; date +%s >".venv-$v/$log.end"; exit $rc; } >".venv-$v/$log" 2>&1 &
		pids[$v]=$!
	done
	failed=""
	for v in $pending; do
		wait "${pids[$v]}" || failed="$failed $v"
	done
}

declare -A result pythons
start=$(date +%s)
pending=""
status=0
for v in "${versions[@]}"; do
	python=$(find_python "$v") || python=""
	if [ -z "$python" ]; then
		echo "test-pythons: no Python $v found (looked in $pyenv_root/versions and PATH)" >&2
		result[$v]=MISSING
		status=1
		continue
	fi
	echo "== Python $v: $python (.venv-$v)"
	pending="$pending $v"
	pythons[$v]=$python
done

prepare_version() { prepare "$1" "${pythons[$1]}"; }
echo "== preparing:$pending"
run_all prepare.log prepare_version
for v in $failed; do
	echo "== Python $v: preparing failed (.venv-$v/prepare.log):"
	tail -30 ".venv-$v/prepare.log"
	result[$v]=FAILED
	status=1
	pending=$(echo "$pending" | tr ' ' '\n' | grep -vx "$v" | tr '\n' ' ')
done

run_pytest() { ".venv-$1/bin/python" -m pytest -q -p no:cacheprovider "${pytest_args[@]}"; }
echo "== pytest on:$pending (${pytest_args[*]})"
run_all pytest.log run_pytest
for v in $pending; do
	echo "== Python $v (.venv-$v/pytest.log):"
	cat ".venv-$v/pytest.log"
	result[$v]="passed in $(($(cat ".venv-$v/pytest.log.end") - start)) s"
done
for v in $failed; do
	result[$v]="FAILED in $(($(cat ".venv-$v/pytest.log.end") - start)) s"
	status=1
done

echo "== test-pythons (pytest ${pytest_args[*]})"
for v in "${versions[@]}"; do
	echo "   $v: ${result[$v]}"
done
echo "   all in $(($(date +%s) - start)) s"
exit $status
