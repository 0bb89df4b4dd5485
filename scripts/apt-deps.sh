#!/usr/bin/env bash
# Install the Debian packages that are missing, asking apt only when one is.
#
#   scripts/apt-deps.sh PACKAGE... where a PACKAGE may be A|B|...: alternatives, the first
#   one installed, else the first one this release has (apt-cache policy shows a candidate).
#
# Debian releases name some packages differently: Debian 13 has llhttp as a library
# (libllhttp-dev) where Debian 12 has only its sources (node-llhttp), and nginx without
# nginx-light. A word none of whose alternatives this release has is an error naming it.
# APT_DEPS_DRY_RUN=1 prints what would be installed (from the package lists as they are)
# and installs nothing.
set -euo pipefail

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

installed() {
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

has_candidate() {
	local policy
	policy=$(apt-cache policy "$1" 2>/dev/null) || return 1
	[[ $policy == *"Candidate: "[!\(]* ]]
}

missing=()
unresolved=()
for word in "$@"; do
	IFS='|' read -r -a names <<<"$word"
	done_=""
	for name in "${names[@]}"; do
		if installed "$name"; then
			done_=1
			break
		fi
	done
	[ -n "$done_" ] && continue
	unresolved+=("$word")
done
[ ${#unresolved[@]} -eq 0 ] && exit 0

# Choosing among alternatives needs the package lists: read them once.
dry=${APT_DEPS_DRY_RUN:-}
[ -n "$dry" ] || $sudo apt-get update -qq
for word in "${unresolved[@]}"; do
	IFS='|' read -r -a names <<<"$word"
	pick=""
	for name in "${names[@]}"; do
		if has_candidate "$name"; then
			pick=$name
			break
		fi
	done
	if [ -z "$pick" ]; then
		echo "apt-deps: this Debian release has no package ${word//|/ or }" >&2
		exit 1
	fi
	missing+=("$pick")
done
echo "installing: ${missing[*]}"
[ -z "$dry" ] || exit 0
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y "${missing[@]}"
