#!/bin/sh
# mmdebstrap --customize-hook for the uagate root file system: run with the root tree as $1 (in
# mmdebstrap's user namespace, so files created here belong to root), after Debian's packages are
# installed. Adds the appliance's own files from image/rootfs (given as $2), enables its units,
# trims what the appliance does not use, and rebuilds the initramfs. The gateway binary itself is
# added later (image/compose.py), so this tree depends on image/ only and can be cached.
set -eu
root=$1
overlay=$2

# The appliance's files, owned by root (modes as in the repository).
(cd "$overlay" && tar --owner=0 --group=0 --numeric-owner -cf - .) | tar -C "$root" -xf -

# The gateway's user (fixed id), its units.
chroot "$root" systemd-sysusers
chroot "$root" systemctl enable systemd-networkd.service systemd-resolved.service \
    systemd-timesyncd.service uagate-hostname.service uagate-reboot.path uagate-confirm.service \
    systemd-repart.service
chroot "$root" systemctl disable apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    fstrim.timer 2>/dev/null || true

# Nothing of the build host's, and nothing secret: no host name, no machine id (a new one each
# boot, the root being read-only), no SSH keys, no random seed.
rm -f "$root/etc/hostname" "$root/var/lib/systemd/random-seed" "$root/etc/ssh/ssh_host_"*
: > "$root/etc/machine-id"
mkdir -p "$root/boot/efi" "$root/var/lib/uagate"

# Kernel modules the appliance has no use for (sound, graphics beyond the firmware's frame
# buffer, cameras, radios), then the initramfs again with the squashfs module.
for m in sound drivers/gpu drivers/media drivers/net/wireless drivers/infiniband \
    drivers/staging drivers/bluetooth net/bluetooth drivers/isdn drivers/iio net/wireless \
    net/mac80211 drivers/input/joystick drivers/input/touchscreen; do
    rm -rf "$root"/usr/lib/modules/*/kernel/$m
done
for k in "$root"/usr/lib/modules/*; do
    chroot "$root" depmod "$(basename "$k")"
done
chroot "$root" update-initramfs -u -k all
rm -f "$root"/boot/*.old-dkms "$root"/vmlinuz.old "$root"/initrd.img.old

# No package manager state or caches on a read-only image.
# Manuals and translations go too; the packages' copyright files stay.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/cache/man/* \
    "$root"/var/log/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
find "$root/usr/share/doc" -type f ! -name copyright -delete
