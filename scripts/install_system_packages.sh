#!/bin/sh
# System packages some tests use, installed when this runs as root on a machine with apt-get; a
# no-op elsewhere (the tests that need them skip, naming what is missing):
#   chromium, chromium-driver   tests/test_review_app.py (the review page in a headless browser)
#   slurm-wlm, munge            tests/test_slurm_profile.py (a one-node SLURM cluster on localhost)
set -eu
PACKAGES="chromium chromium-driver slurm-wlm munge"
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_system_packages: not root or no apt-get; skipping ($PACKAGES)"
    exit 0
fi
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install_system_packages: all installed ($PACKAGES)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# a registry outage must not fail the suite: the tests that need these skip, naming what is missing
if ! { apt-get update -qq && apt-get install -y -qq $missing; }; then
    echo "install_system_packages: could not install$missing; the tests that need them will skip"
fi
