#!/bin/sh
# Knotless install.sh: puts knotless-run and its step agent knotless-agent
# for this host's architecture onto a plain Linux host, from a
# knotless-server's release files (knotless-server --release-dir), each
# checked against the release's SHA256SUMS before anything is installed.
# Served by that server at /-/download/install.sh (docs/runner.md):
#
#   curl -fsSL https://SERVER/-/download/install.sh | sh -s -- --dir ~/.local/bin
#
# Needs sh, uname, curl or wget, sha256sum (or busybox's), mkdir, chmod,
# mv and rm; nothing else. POSIX sh: dash, busybox sh, bash.
set -eu

# The server this script came from: the serving knotless-server writes its
# --url here. --server or KNOTLESS_SERVER override it.
default_server=

say() { printf 'knotless-install: %s\n' "$*"; }
die() {
	printf 'knotless-install: %s\n' "$*" >&2
	exit 1
}

usage() {
	cat <<EOF
Usage: install.sh [--dir DIR] [--server URL]

Installs knotless-run and knotless-agent (the step agent, beside it) for
this host's architecture (uname -m: x86_64 is amd64, aarch64 is arm64)
from a Knotless server's release files. Each file is downloaded into a
temporary directory inside DIR and checked against the release's SHA-256
sums (SERVER/-/download/SHA256SUMS) first; if any does not match,
nothing is installed. Then both are moved into place, each in one rename.

  --dir DIR     where to install (default \$KNOTLESS_INSTALL_DIR, else
                /usr/local/bin if you may write there, else ~/.local/bin
                or ~/bin if it is on PATH)
  --server URL  the Knotless server (default \$KNOTLESS_SERVER, else the
                server this script was downloaded from${default_server:+: $default_server})
  -h, --help    this text

  curl -fsSL SERVER/-/download/install.sh | sh -s -- --dir ~/.local/bin
  wget -qO- SERVER/-/download/install.sh | sh -s -- --dir ~/.local/bin
EOF
}

server=${KNOTLESS_SERVER:-$default_server}
dir=${KNOTLESS_INSTALL_DIR:-}
while [ $# -gt 0 ]; do
	case $1 in
	--dir | --server)
		[ $# -ge 2 ] || die "$1 needs a value (see --help)"
		case $1 in --dir) dir=$2 ;; *) server=$2 ;; esac
		shift 2
		;;
	--dir=*) dir=${1#--dir=} && shift ;;
	--server=*) server=${1#--server=} && shift ;;
	-h | --help) usage && exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

case $server in
http://?* | https://?*) server=${server%/} ;;
'') die "no server: give --server URL (or KNOTLESS_SERVER), the Knotless server's base URL such as https://ci.example.com" ;;
*) die "--server '$server' is not an http:// or https:// URL" ;;
esac

os=$(uname -s)
[ "$os" = Linux ] || die "this host runs $os (uname -s): Knotless has builds for Linux only"
machine=$(uname -m)
# As the runner pod's init container maps it (deploy/kubernetes/base/deployment.yaml;
# both held to internal/deploy.Machines by a test).
case $machine in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) die "this host's architecture is '$machine' (uname -m): Knotless has builds for linux/amd64 (x86_64) and linux/arm64 (aarch64) only; nothing installed" ;;
esac

if command -v curl >/dev/null 2>&1; then
	fetch() { curl -fsSL --retry 2 -o "$1" "$2"; }
elif command -v wget >/dev/null 2>&1; then
	fetch() { wget -q -O "$1" "$2"; }
else
	die "neither curl nor wget is installed: install one of them (e.g. apt-get install curl, apk add curl), then run this again"
fi
if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$1"; }
elif command -v busybox >/dev/null 2>&1 && busybox sha256sum /dev/null >/dev/null 2>&1; then
	sha256() { busybox sha256sum "$1"; }
else
	die "no sha256sum (coreutils or busybox) to check the downloads with: install one, then run this again"
fi

on_path() {
	case :$PATH: in *:"$1":*) return 0 ;; esac
	return 1
}
if [ -z "$dir" ]; then
	if [ -d /usr/local/bin ] && [ -w /usr/local/bin ]; then
		dir=/usr/local/bin
	elif [ -n "${HOME:-}" ] && on_path "$HOME/.local/bin"; then
		dir=$HOME/.local/bin
	elif [ -n "${HOME:-}" ] && on_path "$HOME/bin"; then
		dir=$HOME/bin
	else
		die "no directory to install into: /usr/local/bin is not writable by you and neither ~/.local/bin nor ~/bin is on PATH; give one with --dir DIR (or KNOTLESS_INSTALL_DIR)"
	fi
fi
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac
mkdir -p "$dir" 2>/dev/null || die "cannot make the directory $dir: choose another with --dir DIR, or run as a user who may write there"
[ -w "$dir" ] || die "$dir is not writable by you: choose another with --dir DIR, or run as a user who may write there"

# In DIR itself, so that moving a checked file into place is one rename.
tmp=$dir/.knotless-install.$$
mkdir "$tmp" 2>/dev/null || die "cannot write into $dir (mkdir $tmp failed): choose another with --dir DIR, or run as a user who may write there"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

base=$server/-/download
say "this host's architecture: linux/$arch (uname -m: $machine)"
say "fetching the release's sums from $base/SHA256SUMS"
fetch "$tmp/SHA256SUMS" "$base/SHA256SUMS" || die "download of $base/SHA256SUMS failed: is $server a Knotless server started with --release-dir? nothing installed"

for program in knotless-run knotless-agent; do
	file=$program-linux-$arch
	want=
	while read -r sum name; do
		[ "$name" = "$file" ] && want=$sum
	done <"$tmp/SHA256SUMS"
	case $want in
	'') die "$file: not in $base/SHA256SUMS: the release has no $program for linux/$arch; nothing installed" ;;
	*[!0-9a-f]*) die "$file: $base/SHA256SUMS gives '$want', not a SHA-256 digest; nothing installed" ;;
	esac
	[ ${#want} -eq 64 ] || die "$file: $base/SHA256SUMS gives '$want', not a SHA-256 digest; nothing installed"
	say "fetching $file from $base/$file"
	fetch "$tmp/$file" "$base/$file" || die "$file: download from $base/$file failed; nothing installed"
	set -- $(sha256 "$tmp/$file")
	got=${1:-}
	if [ "$got" != "$want" ]; then
		die "$file: SHA-256 mismatch: $base/SHA256SUMS says $want, $base/$file gave $got; refusing it (altered, or not this release's); nothing installed"
	fi
	say "$file ok (sha256 $got)"
done

# Every file is checked: only now does anything reach DIR.
for program in knotless-agent knotless-run; do
	chmod 0755 "$tmp/$program-linux-$arch"
	mv -f "$tmp/$program-linux-$arch" "$dir/$program" || die "cannot move $program into $dir"
	say "installed $dir/$program"
done
version=$("$dir/knotless-run" --version 2>&1) || die "$dir/knotless-run does not run on this host: $version"
say "$version"
on_path "$dir" || say "note: $dir is not on PATH; add it (export PATH=\"$dir:\$PATH\") or call $dir/knotless-run"
