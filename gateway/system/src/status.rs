//! What RAUC reports about the slots, read from the output of
//! `rauc status --detailed --output-format=json` (RAUC 1.8). Pure
//! parsing: [`crate::Updater::status`] runs the program and hands its
//! output to [`parse_status`].
//!
//! The JSON is an object with `compatible`, `booted` (the bootname of the
//! booted slot, e.g. `A`), `boot_primary` (the slot name the boot loader
//! tries first) and `slots`: a list of one-key objects, slot name (e.g.
//! `rootfs.0`) to its fields: `class`, `device`, `bootname`, `state`
//! (`booted`, `active`, `inactive`), `parent`, `boot_status` (`good`,
//! `bad`, or null for slots the boot loader does not know) and, with
//! `--detailed`, `slot_status` with the `bundle` it holds (`compatible`,
//! `version`), `installed` (`timestamp`, `count`) and `status`.

use serde_json::Value;

use crate::SystemError;

/// The slots as RAUC sees them: what the System page and
/// `GET /api/v1/system` show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemStatus {
    /// The appliance's `compatible` string (bundles must carry the same).
    pub compatible: Option<String>,
    /// The bootname of the booted slot (`A` or `B`).
    pub booted: Option<String>,
    /// The root slots (those the boot loader boots: with a bootname and no
    /// parent), sorted by bootname.
    pub slots: Vec<Slot>,
}

/// One root slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// RAUC's slot name, e.g. `rootfs.1`.
    pub name: String,
    /// The boot loader's name for it: `A` or `B`.
    pub bootname: String,
    /// Its block device.
    pub device: String,
    /// Booted, active (marked to boot next) or inactive.
    pub state: SlotState,
    /// Whether the boot loader considers it good; `None` when RAUC could
    /// not tell.
    pub boot_status: Option<BootStatus>,
    /// The `compatible` of the bundle installed into it, when RAUC knows
    /// of one.
    pub bundle_compatible: Option<String>,
    /// The version of the bundle installed into it, when RAUC knows.
    pub version: Option<String>,
    /// When that bundle was installed (RAUC's timestamp, RFC 3339 UTC).
    pub installed: Option<String>,
    /// RAUC's status of the last installation into it (`ok`, or what went
    /// wrong).
    pub install_status: Option<String>,
}

/// The state RAUC gives a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// The running system is on it.
    Booted,
    /// Not running, but marked active (booted next).
    Active,
    /// Not running.
    Inactive,
}

impl SlotState {
    /// The word RAUC uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotState::Booted => "booted",
            SlotState::Active => "active",
            SlotState::Inactive => "inactive",
        }
    }
}

/// The boot loader's verdict on a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootStatus {
    /// It booted and was marked good (or was never tried and is allowed).
    Good,
    /// It failed to come up (boot attempts used up) or was marked bad.
    Bad,
}

impl BootStatus {
    /// The word RAUC uses.
    pub fn as_str(self) -> &'static str {
        match self {
            BootStatus::Good => "good",
            BootStatus::Bad => "bad",
        }
    }
}

impl Slot {
    /// Whether RAUC knows of nothing installed into it (a fresh
    /// appliance's other slot).
    pub fn is_empty(&self) -> bool {
        self.version.is_none() && self.bundle_compatible.is_none() && self.installed.is_none()
    }
}

impl SystemStatus {
    /// The slot the running system is on.
    pub fn booted_slot(&self) -> Option<&Slot> {
        self.slots
            .iter()
            .find(|s| Some(&s.bootname) == self.booted.as_ref())
            .or_else(|| self.slots.iter().find(|s| s.state == SlotState::Booted))
    }

    /// The other root slot: where the next update is installed.
    pub fn other_slot(&self) -> Option<&Slot> {
        let booted = self.booted_slot().map(|s| s.name.clone());
        self.slots.iter().find(|s| Some(&s.name) != booted.as_ref())
    }

    /// The root slot with this bootname.
    pub fn slot(&self, bootname: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.bootname == bootname)
    }
}

/// Reads the output of `rauc status --detailed --output-format=json`.
/// Anything printed before the JSON object (a warning on stdout) is
/// skipped. Fails when the text holds no JSON object with a `slots` list.
pub fn parse_status(text: &str) -> Result<SystemStatus, SystemError> {
    let start = text
        .find('{')
        .ok_or_else(|| SystemError::Status("no JSON in RAUC's answer".into()))?;
    let root: Value = serde_json::from_str(text[start..].trim_end())
        .map_err(|e| SystemError::Status(format!("RAUC's answer is not valid JSON: {e}")))?;
    let string = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let list = root
        .get("slots")
        .and_then(Value::as_array)
        .ok_or_else(|| SystemError::Status("RAUC's answer has no slot list".into()))?;
    let mut slots = Vec::new();
    for entry in list {
        let Some(map) = entry.as_object() else {
            continue;
        };
        for (name, fields) in map {
            // Root slots only: the boot loader knows them, nothing contains them.
            let Some(bootname) = string(fields, "bootname") else {
                continue;
            };
            if string(fields, "parent").is_some() {
                continue;
            }
            let state = match fields.get("state").and_then(Value::as_str) {
                Some("booted") => SlotState::Booted,
                Some("active") => SlotState::Active,
                _ => SlotState::Inactive,
            };
            let boot_status = match fields.get("boot_status").and_then(Value::as_str) {
                Some("good") => Some(BootStatus::Good),
                Some("bad") => Some(BootStatus::Bad),
                _ => None,
            };
            let detail = fields.get("slot_status").unwrap_or(&Value::Null);
            let bundle = detail.get("bundle").unwrap_or(&Value::Null);
            let installed = detail.get("installed").unwrap_or(&Value::Null);
            slots.push(Slot {
                name: name.clone(),
                bootname,
                device: string(fields, "device").unwrap_or_default(),
                state,
                boot_status,
                bundle_compatible: string(bundle, "compatible"),
                version: string(bundle, "version"),
                installed: string(installed, "timestamp"),
                install_status: string(detail, "status"),
            });
        }
    }
    slots.sort_by(|a, b| a.bootname.cmp(&b.bootname));
    Ok(SystemStatus {
        compatible: string(&root, "compatible"),
        booted: string(&root, "booted"),
        slots,
    })
}
