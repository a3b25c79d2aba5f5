#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver, for the tests that open the HTML reports in a real
# headless browser (tests/python/test_report.py). Sourced by scripts/test.sh; installs them
# where they are missing and this runs as root (CI), else says what to install.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "WARNING: no /usr/bin/chromium or /usr/bin/chromedriver: the report tests will fail (as root: apt-get install chromium chromium-driver)" >&2
  fi
fi
