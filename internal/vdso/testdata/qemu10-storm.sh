#!/bin/sh
# TestSignalStorm for linux/arm64 under qemu 10, built with a runtime whose
# inVDSOPage covers qemu's vDSO (call_linux_arm64.go says why the stock
# runtime's does not), so that signals landing in the vDSO take the
# runtime's g-slot path. With -without-g-store the call is built without
# its store of g (both through go test -overlay: the tree is not touched),
# and the test must die with "fatal: bad g in signal handler".
#
# Usage, from internal/vdso: sh testdata/qemu10-storm.sh [-without-g-store]
# QEMU10 names the emulator (default /opt/qemu10/usr/bin/qemu-aarch64-static).
set -eu
qemu=${QEMU10:-/opt/qemu10/usr/bin/qemu-aarch64-static}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

rt=$(go env GOROOT)/src/runtime/vdso_linux.go
sed -e 's/vdsoLoadStart = info.loadOffset$/vdsoLoadStart = info.loadOffset + uintptr(pt.p_vaddr)/' \
    -e 's/vdsoLoadEnd = info.loadOffset + uintptr(pt.p_memsz)$/vdsoLoadEnd = vdsoLoadStart + uintptr(pt.p_memsz)/' \
    "$rt" >"$dir/vdso_linux.go"
if [ "$(grep -c -e '= info.loadOffset + uintptr(pt.p_vaddr)' -e '= vdsoLoadStart + uintptr(pt.p_memsz)' "$dir/vdso_linux.go")" != 2 ]; then
	echo "qemu10-storm: $rt has changed; the fix does not apply" >&2
	exit 1
fi
replace="\"$rt\":\"$dir/vdso_linux.go\""

if [ "${1:-}" = -without-g-store ]; then
	sed 's/^\tMOVD g, (R22); \\$/\tMOVD ZR, ZR; \\/' call_linux_arm64.s >"$dir/call_linux_arm64.s"
	if cmp -s call_linux_arm64.s "$dir/call_linux_arm64.s"; then
		echo "qemu10-storm: the g store in call_linux_arm64.s was not found" >&2
		exit 1
	fi
	replace="$replace,\"$PWD/call_linux_arm64.s\":\"$dir/call_linux_arm64.s\""
fi
printf '{"Replace":{%s}}' "$replace" >"$dir/overlay.json"

set +e
SCHEDCLOCK_QUALIFY=1 GOARCH=arm64 go test -overlay "$dir/overlay.json" -count=1 -exec "$qemu" -run '^TestSignalStorm$' -v . >"$dir/out" 2>&1
rc=$?
set -e
cat "$dir/out"
if [ "${1:-}" = -without-g-store ]; then
	if grep -q 'fatal: bad g in signal handler' "$dir/out"; then
		echo "qemu10-storm: killed: without the g store the storm crashes the process (status $rc)"
		exit 0
	fi
	echo "qemu10-storm: SURVIVED: the storm did not crash without the g store" >&2
	exit 1
fi
exit $rc
