#!/usr/bin/env bash
# Builds the Debian package of pgtier: target/debian/pgtier_VERSION-1_ARCH.deb, then runs
# lintian on it (errors fail the build).
#
#   scripts/package.sh [--binary PATH] [--out DIR] [--no-lintian] [--no-pgo]
#
# --binary packages an already built pgtier (tests/tests/package.rs packages the debug binary
# the tests run, so the test command builds no release binary for it); without it the
# release binary is built with profile-guided optimization (scripts/build-pgo.sh, which
# trains it with pgbench against a throw-away PostgreSQL), or plainly with --no-pgo. The man
# pages are written by pgtier-manpage (packaging/manpage) from docs/config.md and
# docs/operations.md, so they list exactly what the docs list.
#
# Why dpkg-deb from a staged tree and not cargo-deb: everything the package holds besides the
# binary (units, maintainer scripts, conffiles, generated man pages, the ops dashboard) is a
# file in packaging/ installed by the few lines below, which dpkg-deb (in every Debian) turns
# into a package; cargo-deb would be one more tool to install and a second description of the
# same layout in Cargo.toml, and a debian/ source package (debhelper) would need a full
# source build. Needs dpkg-dev (dpkg-shlibdeps) and, for the check, lintian
# (scripts/install-deps.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
out="target/debian"
lintian=1
pgo=1
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-lintian) lintian=0; shift ;;
    --no-pgo) pgo=0; shift ;;
    *) echo "usage: $0 [--binary PATH] [--out DIR] [--no-lintian] [--no-pgo]" >&2; exit 2 ;;
  esac
done

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
debversion="${version}-1"
arch="$(dpkg --print-architecture)"
# The date of the last commit (reproducible), else today (a tree without git).
date="$(git log -1 --format=%cs 2>/dev/null || date -u +%F)"
changelog_date="$(date -u -d "$date" '+%a, %d %b %Y %H:%M:%S +0000')"
# Who built it, as Debian's tools read it (DEBFULLNAME, DEBEMAIL); set both for a package
# you publish.
maintainer="${DEBFULLNAME:-pgtier developers} <${DEBEMAIL:-pgtier@users.noreply.github.com}>"

target="${CARGO_TARGET_DIR:-target}"
if [ -z "$binary" ] && [ "$pgo" = 1 ]; then
  binary="$(bash scripts/build-pgo.sh)"
elif [ -z "$binary" ]; then
  cargo build --release --locked -p pgtier --bin pgtier
  binary="$target/release/pgtier"
fi
cargo build --locked -q -p pgtier-manpage --bin pgtier-manpage

stage="$(mktemp -d)"
work="$(mktemp -d)"
trap 'rm -rf "$stage" "$work"' EXIT
umask 022

# The binary, without its symbols (a debug build included: the package needs no debuginfo).
install -D -m 0755 "$binary" "$stage/usr/sbin/pgtier"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/sbin/pgtier"

# Configuration (conffiles). userlist.txt's owner and mode are set by postinst, once the
# pgtier user exists.
install -D -m 0644 packaging/pgtier.ini "$stage/etc/pgtier/pgtier.ini"
install -m 0640 /dev/null "$stage/etc/pgtier/userlist.txt"
install -D -m 0644 packaging/pgtier.logrotate "$stage/etc/logrotate.d/pgtier"

# systemd: the units and the runtime directory.
install -D -m 0644 packaging/pgtier.service "$stage/lib/systemd/system/pgtier.service"
install -m 0644 packaging/pgtier@.service "$stage/lib/systemd/system/pgtier@.service"
install -D -m 0644 packaging/pgtier.tmpfiles "$stage/usr/lib/tmpfiles.d/pgtier.conf"

# Man pages, generated from the docs.
"$target/debug/pgtier-manpage" --out "$work/man" --docs docs --version "$version" --date "$date"
install -d "$stage/usr/share/man/man1" "$stage/usr/share/man/man5"
gzip -9n -c "$work/man/pgtier.1" >"$stage/usr/share/man/man1/pgtier.1.gz"
gzip -9n -c "$work/man/pgtier.ini.5" >"$stage/usr/share/man/man5/pgtier.ini.5.gz"

# Docs: the reference, the operator's dashboard and alert rules, copyright and changelog.
doc="$stage/usr/share/doc/pgtier"
install -d "$doc/img" "$doc/ops"
install -m 0644 README.md docs/*.md "$doc/"
install -m 0644 docs/img/*.png "$doc/img/"
install -m 0644 docs/ops/* "$doc/ops/"
install -m 0644 packaging/debian/copyright "$doc/copyright"
sed "s/@VERSION@/$debversion/; s/@MAINTAINER@/$maintainer/; s/Sun, 06 Dec 2026 00:00:00 +0000/$changelog_date/" \
  packaging/debian/changelog | gzip -9n >"$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"
install -D -m 0644 packaging/debian/lintian-overrides "$stage/usr/share/lintian/overrides/pgtier"

# Control files.
install -d -m 0755 "$stage/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$stage/DEBIAN/"
printf '%s\n' /etc/pgtier/pgtier.ini /etc/pgtier/userlist.txt /etc/logrotate.d/pgtier \
  >"$stage/DEBIAN/conffiles"
mkdir -p "$work/shlibs/debian"
printf 'Source: pgtier\n\nPackage: pgtier\nArchitecture: any\n' >"$work/shlibs/debian/control"
shlibs="$(cd "$work/shlibs" && dpkg-shlibdeps -O "$stage/usr/sbin/pgtier" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')"
[ -n "$shlibs" ] || { echo "package.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
sed "s/@VERSION@/$debversion/; s/@ARCH@/$arch/; s/@SIZE@/$size/; s/@SHLIBS@/$shlibs/; s/@MAINTAINER@/$maintainer/" \
  packaging/debian/control.in >"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/pgtier_${debversion}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"

if [ "$lintian" = 1 ]; then
  # Errors fail the build; warnings are printed for the reader.
  lintian --fail-on error --tag-display-limit 0 "$deb" >&2
fi
