//! The RAUC status parser on real-shaped `rauc status --detailed
//! --output-format=json` output (RAUC 1.8): the samples in `tests/data/`
//! have the fields, nulls and slot order RAUC prints (its slot list comes
//! from a hash table, so not in slot order; an ESP and a child slot are
//! listed beside the root slots).

use uagate_system::{parse_status, BootStatus, SlotState};

const B_GOOD: &str = include_str!("data/booted-a-b-good.json");
const B_EMPTY: &str = include_str!("data/fresh-b-empty.json");
const A_BAD: &str = include_str!("data/booted-b-a-bad.json");

#[test]
fn booted_a_with_b_good_and_a_bundle_version() {
    let s = parse_status(B_GOOD).unwrap();
    assert_eq!(s.compatible.as_deref(), Some("uagate-appliance-x86_64"));
    assert_eq!(s.booted.as_deref(), Some("A"));
    // Only the two root slots, in bootname order; the ESP and appfs are not root slots.
    let names: Vec<&str> = s.slots.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["rootfs.0", "rootfs.1"]);
    let a = s.booted_slot().unwrap();
    assert_eq!(a.bootname, "A");
    assert_eq!(a.state, SlotState::Booted);
    assert_eq!(a.boot_status, Some(BootStatus::Good));
    assert_eq!(a.version.as_deref(), Some("0.1.1"));
    assert_eq!(a.device, "/dev/disk/by-partlabel/rootA");
    let b = s.other_slot().unwrap();
    assert_eq!(b.bootname, "B");
    assert_eq!(b.state, SlotState::Inactive);
    assert_eq!(b.boot_status, Some(BootStatus::Good));
    assert_eq!(b.version.as_deref(), Some("0.1.0"));
    assert_eq!(b.installed.as_deref(), Some("2025-05-02T09:14:31Z"));
    assert_eq!(b.install_status.as_deref(), Some("ok"));
    assert!(!b.is_empty());
}

#[test]
fn b_never_installed_is_empty() {
    let s = parse_status(B_EMPTY).unwrap();
    let b = s.other_slot().unwrap();
    assert_eq!(b.bootname, "B");
    assert!(b.is_empty(), "{b:?}");
    assert_eq!(b.version, None);
    assert_eq!(b.installed, None);
    // The slot written by the image build carries no RAUC bundle record either.
    assert!(s.booted_slot().unwrap().is_empty());
}

#[test]
fn booted_b_with_a_bad() {
    let s = parse_status(A_BAD).unwrap();
    assert_eq!(s.booted.as_deref(), Some("B"));
    assert_eq!(s.booted_slot().unwrap().version.as_deref(), Some("0.2.0"));
    let a = s.other_slot().unwrap();
    assert_eq!(a.bootname, "A");
    assert_eq!(a.boot_status, Some(BootStatus::Bad));
    assert_eq!(a.version.as_deref(), Some("0.3.0"));
    assert_eq!(s.slot("A"), Some(a));
}

#[test]
fn text_before_the_json_is_skipped_and_garbage_refused() {
    let noisy = format!("rauc-Message: 09:00:01.123: Using system config file\n{B_GOOD}\n");
    assert_eq!(parse_status(&noisy).unwrap(), parse_status(B_GOOD).unwrap());
    assert!(parse_status("").is_err());
    assert!(parse_status("Failed to create proxy: no such name").is_err());
    assert!(parse_status("{\"compatible\":\"x\"}").is_err());
}
