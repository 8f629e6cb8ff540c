// Package browsertest holds the end-to-end browser tests of the dashboard and the
// GraphQL playground. They build the real binary, start it on a free loopback port
// with a temporary database, and drive headless Chromium (/usr/bin/chromium, Debian's
// package) with chromedp. Without Chromium they skip with a message.
//
// Screenshots go to $ARTIFACTS_DIR (default: a temporary directory); with
// UPDATE_SCREENSHOT=1 the dashboard screenshot is also written to docs/dashboard.png.
//
// The package has no non-test code.
package browsertest
