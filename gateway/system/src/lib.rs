#![forbid(unsafe_code)]
//! `uagate-system`: the appliance image underneath the gateway, as the
//! console's System page and `/api/v1/system` see it.
//!
//! The appliance has two root slots, A and B, managed by RAUC: one is
//! booted, the other receives the next update, and the boot loader falls
//! back to the good one when a new image does not come up. This crate
//!
//! - reads what RAUC reports (`rauc status --detailed --output-format=json`)
//!   into a [`SystemStatus`] ([`status`], pure parsing, no IO),
//! - reads the image version from the os-release file ([`os_release`]),
//! - reads what `rauc info` says about an update bundle: its version and
//!   the signed dm-verity parameters of its payload ([`bundle`], pure),
//! - checks a verity bundle's payload against its hash tree before
//!   anything is written, so a damaged or altered bundle is refused
//!   up front ([`verity`]),
//! - runs `rauc install` on an uploaded bundle in the background, one at
//!   a time, and keeps its [`UpdateState`] for the page and REST, and asks
//!   for a reboot by creating a request file ([`updater`]).
//!
//! The gateway runs unprivileged: it calls the `rauc` command-line tool as
//! its own user (the image's D-Bus policy allows it), and a reboot is done
//! by a root-owned systemd path unit that watches the request file. Where
//! the `rauc` program is missing the gateway is not running on the
//! appliance image: status says so, and install and reboot are refused
//! with [`SystemError::NotOnAppliance`].

pub mod bundle;
pub mod error;
pub mod os_release;
pub mod status;
pub mod updater;
pub mod verity;

pub use bundle::{parse_info, BundleInfo, Verity};
pub use error::SystemError;
pub use status::{parse_status, BootStatus, Slot, SlotState, SystemStatus};
pub use updater::{
    explain_failure, DetailBy, Failure, Settings, Update, UpdateState, Updater, Upload,
    MAX_BUNDLE_BYTES,
};
pub use verity::{check_payload, VerityError};
