#!/usr/bin/env bash
# Unpacks the Debian packages the GPU machine's image lacks into .deps/usr, to
# be carried with a device call: PCRE2 (the tokenizer's split regexes) and
# utf8proc (its NFC normalizer). benchmarks/h200_session.sh puts .deps/usr on
# CMAKE_PREFIX_PATH and LD_LIBRARY_PATH when it exists. The libraries need only
# glibc 2.14, so packages from this machine's release run there.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2)
rm -rf .deps && mkdir .deps
for deb in "$tmp"/*.deb; do dpkg -x "$deb" .deps; done
rm -rf "$tmp"
du -sh .deps
