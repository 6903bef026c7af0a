//! The IO side: runs the `rauc` program, keeps the state of the one
//! update that may run at a time, and asks for a reboot.
//!
//! An update goes: [`Updater::receive`] (the console or REST starts
//! receiving a bundle; refused while another update runs or off the
//! appliance) → [`Upload::write`] for each piece of the upload →
//! [`Upload::install`], which the caller spawns in the background: it
//! runs `rauc info` (RAUC checks the signature; the gateway reads the
//! version and the payload's verity parameters), checks a verity bundle's
//! payload against its hash tree ([`crate::verity`]), then runs `rauc
//! install`, and records the outcome. A bundle whose signature or payload
//! does not pass is refused before `rauc install` runs: nothing is
//! written. The state ([`Updater::state`]) is what the System page and
//! `GET /api/v1/system` show meanwhile. The uploaded file is removed when
//! the install ends or the upload is abandoned.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;

use crate::bundle::{parse_info, BundleInfo};
use crate::verity::{check_payload, VerityError};
use crate::{parse_status, SystemError, SystemStatus};

/// The largest update bundle accepted (2 GiB).
pub const MAX_BUNDLE_BYTES: u64 = 2 << 30;

/// How long `rauc status` and `rauc info` may take.
const QUICK: Duration = Duration::from_secs(60);

/// How long `rauc install` may take before it is given up (the daemon
/// may still finish; the next status shows it).
const INSTALL: Duration = Duration::from_secs(3600);

/// The file name of an upload in the upload directory.
const UPLOAD_NAME: &str = "upload.raucb";

/// Where the updater finds RAUC, the image version and the reboot request
/// file. Read once at start-up ([`Settings::from_env`]); tests pass their
/// own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The `rauc` program (`UAGATE_RAUC`, default `/usr/bin/rauc`). A bare
    /// name is looked up on `PATH`.
    pub rauc: PathBuf,
    /// The os-release file (`UAGATE_OS_RELEASE`, default `/etc/os-release`).
    pub os_release: PathBuf,
    /// The file whose creation makes the image's root-owned systemd path
    /// unit reboot the appliance (`UAGATE_REBOOT_REQUEST`, default
    /// `/run/uagate/reboot`; `/run/uagate` is the gateway unit's
    /// RuntimeDirectory).
    pub reboot_request: PathBuf,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            rauc: PathBuf::from("/usr/bin/rauc"),
            os_release: PathBuf::from("/etc/os-release"),
            reboot_request: PathBuf::from("/run/uagate/reboot"),
        }
    }
}

impl Settings {
    /// No RAUC at all: the updater reports "not on the appliance image"
    /// and refuses every change. What a gateway has until it is given
    /// its real settings (tests that do not test updates, embedders).
    pub fn absent() -> Settings {
        Settings {
            rauc: PathBuf::new(),
            ..Settings::default()
        }
    }

    /// The defaults, each overridden by its environment variable when set
    /// and not empty. Called once by `uagate run`.
    pub fn from_env() -> Settings {
        Settings::from_lookup(|name| std::env::var_os(name))
    }

    /// The defaults, overridden by `lookup(variable)` (the environment
    /// in [`Settings::from_env`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<std::ffi::OsString>) -> Settings {
        let d = Settings::default();
        let or = |name: &str, default: PathBuf| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or(default)
        };
        Settings {
            rauc: or("UAGATE_RAUC", d.rauc),
            os_release: or("UAGATE_OS_RELEASE", d.os_release),
            reboot_request: or("UAGATE_REBOOT_REQUEST", d.reboot_request),
        }
    }
}

/// What an update installs: the bundle's version (when RAUC told) and the
/// slot it goes to (the one not booted, when RAUC told).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// The bundle's version.
    pub version: Option<String>,
    /// The target slot's bootname (`A` or `B`).
    pub slot: Option<String>,
}

/// Who wrote a [`Failure`]'s detail line: the page and the message name
/// it ("RAUC said", "RAUC: …").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DetailBy {
    /// RAUC's own line, from `rauc info` or `rauc install`.
    #[default]
    Rauc,
    /// The gateway's check of the bundle's payload against its hash tree
    /// ([`crate::verity`]).
    Check,
}

impl DetailBy {
    /// The label in front of the detail in [`Failure::message`]: `RAUC`
    /// or `Check`.
    pub fn label(self) -> &'static str {
        match self {
            DetailBy::Rauc => "RAUC",
            DetailBy::Check => "Check",
        }
    }
}

/// Why an installation failed, in an operator's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The bundle was refused before anything was written (nothing
    /// changed): by RAUC, or by the gateway's check of its payload.
    pub refused: bool,
    /// What happened, as a sentence: "the update bundle's signature is not
    /// valid for this appliance. Nothing was changed."
    pub reason: String,
    /// RAUC's own line about it, when it printed one, or what the
    /// gateway's check found (see `detail_by`).
    pub detail: Option<String>,
    /// Who wrote `detail`.
    pub detail_by: DetailBy,
}

impl Failure {
    /// The whole message: `Refused: <reason>` (or `Failed: <reason>`),
    /// then the detail after its label ("RAUC: …", "Check: …").
    pub fn message(&self) -> String {
        let head = if self.refused { "Refused" } else { "Failed" };
        match &self.detail {
            Some(d) => format!("{head}: {} {}: {d}", self.reason, self.detail_by.label()),
            None => format!("{head}: {}", self.reason),
        }
    }
}

/// The reason given when a bundle's payload does not match its signed
/// hash tree (or the file is not laid out as its signature states).
const ALTERED: &str = "the update bundle's contents do not match its signature: it was damaged \
                       on the way or altered. Nothing was changed.";

/// The state of the update, as the System page and REST show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum UpdateState {
    /// No update since the gateway started.
    #[default]
    Idle,
    /// A bundle is being uploaded.
    Receiving {
        /// When the upload began.
        since: SystemTime,
    },
    /// RAUC is installing it.
    Installing {
        /// When the installation began.
        since: SystemTime,
        /// What is installed where.
        update: Update,
    },
    /// Installed into the other slot; the appliance boots it after a
    /// restart.
    Installed {
        /// When it finished.
        at: SystemTime,
        /// What was installed where.
        update: Update,
    },
    /// RAUC refused the bundle or the installation failed.
    Failed {
        /// When it ended.
        at: SystemTime,
        /// Why.
        failure: Failure,
    },
}

impl UpdateState {
    /// `idle`, `receiving`, `installing`, `installed` or `failed` (REST).
    pub fn name(&self) -> &'static str {
        match self {
            UpdateState::Idle => "idle",
            UpdateState::Receiving { .. } => "receiving",
            UpdateState::Installing { .. } => "installing",
            UpdateState::Installed { .. } => "installed",
            UpdateState::Failed { .. } => "failed",
        }
    }

    /// Whether an update is under way (a new one, or a restart, is refused).
    pub fn busy(&self) -> bool {
        matches!(
            self,
            UpdateState::Receiving { .. } | UpdateState::Installing { .. }
        )
    }

    /// When the state began.
    pub fn since(&self) -> Option<SystemTime> {
        match self {
            UpdateState::Idle => None,
            UpdateState::Receiving { since } | UpdateState::Installing { since, .. } => {
                Some(*since)
            }
            UpdateState::Installed { at, .. } | UpdateState::Failed { at, .. } => Some(*at),
        }
    }

    /// The state in words an operator reads at a glance ("Installing
    /// uagate 0.2.0 into slot B…"); `None` while idle.
    pub fn message(&self) -> Option<String> {
        let into = |u: &Update| match &u.slot {
            Some(s) => format!(" into slot {s}"),
            None => String::new(),
        };
        Some(match self {
            UpdateState::Idle => return None,
            UpdateState::Receiving { .. } => "Receiving the update bundle…".to_string(),
            UpdateState::Installing { update, .. } => match &update.version {
                Some(v) => format!("Installing uagate {v}{}…", into(update)),
                None => format!("Installing the update{}…", into(update)),
            },
            UpdateState::Installed { update, .. } => {
                let what = update.version.as_deref().unwrap_or("the update");
                format!(
                    "Installed {what}{}. Restart the appliance to use it.",
                    into(update)
                )
            }
            UpdateState::Failed { failure, .. } => failure.message(),
        })
    }
}

/// Runs RAUC for the console; one per gateway, shared.
#[derive(Debug)]
pub struct Updater {
    settings: Settings,
    upload_dir: PathBuf,
    state: Mutex<UpdateState>,
}

impl Updater {
    /// An updater with `settings`, receiving bundles into `upload_dir`
    /// (`<data dir>/updates`; created when the first upload starts).
    pub fn new(settings: Settings, upload_dir: PathBuf) -> Updater {
        Updater {
            settings,
            upload_dir,
            state: Mutex::new(UpdateState::Idle),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether the `rauc` program is there: the gateway runs on the
    /// appliance image.
    pub fn on_appliance(&self) -> bool {
        self.program().is_some()
    }

    /// The `rauc` program's path, if it exists (a bare name is looked up on
    /// `PATH`).
    fn program(&self) -> Option<PathBuf> {
        let rauc = &self.settings.rauc;
        if rauc.as_os_str().is_empty() {
            return None;
        }
        if rauc.components().count() > 1 || rauc.is_absolute() {
            return rauc.is_file().then(|| rauc.clone());
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(rauc))
            .find(|p| p.is_file())
    }

    fn not_on_appliance(&self) -> SystemError {
        SystemError::NotOnAppliance {
            program: self.settings.rauc.display().to_string(),
        }
    }

    /// The update's state now.
    pub fn state(&self) -> UpdateState {
        self.state.lock().clone()
    }

    fn set(&self, state: UpdateState) {
        *self.state.lock() = state;
    }

    /// Runs `rauc ARGS` with a time limit, capturing its output.
    async fn rauc(&self, args: &[&OsStr], limit: Duration) -> Result<Output, SystemError> {
        let program = self.program().ok_or_else(|| self.not_on_appliance())?;
        let child = tokio::process::Command::new(&program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => self.not_on_appliance(),
                _ => SystemError::io(format!("cannot run {}", program.display()), e),
            })?;
        match tokio::time::timeout(limit, child.wait_with_output()).await {
            Ok(out) => out.map_err(|e| SystemError::io("RAUC did not finish", e)),
            Err(_) => Err(SystemError::io(
                format!("RAUC did not answer within {} s", limit.as_secs()),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            )),
        }
    }

    /// The slots: runs `rauc status --detailed --output-format=json`.
    /// Called for every view of the System page and `GET /api/v1/system`.
    pub async fn status(&self) -> Result<SystemStatus, SystemError> {
        let out = self
            .rauc(
                &[
                    OsStr::new("status"),
                    OsStr::new("--detailed"),
                    OsStr::new("--output-format=json"),
                ],
                QUICK,
            )
            .await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = last_line(&stderr)
                .or_else(|| last_line(&stdout))
                .unwrap_or_else(|| format!("exit status {}", out.status));
            return Err(SystemError::Status(line));
        }
        parse_status(&stdout)
    }

    /// The image version from the os-release file; `None` when it cannot
    /// be read or names none.
    pub async fn image_version(&self) -> Option<String> {
        let text = tokio::fs::read_to_string(&self.settings.os_release)
            .await
            .ok()?;
        crate::os_release::image_version(&text)
    }

    /// Whether the os-release file is the appliance image's
    /// ([`crate::os_release::is_appliance_image`]); `false` when it cannot
    /// be read.
    pub async fn on_appliance_image(&self) -> bool {
        tokio::fs::read_to_string(&self.settings.os_release)
            .await
            .is_ok_and(|text| crate::os_release::is_appliance_image(&text))
    }

    /// Starts receiving a bundle: refused off the appliance
    /// ([`SystemError::NotOnAppliance`]) and while another update is under
    /// way ([`SystemError::Busy`]). The state is `receiving` until the
    /// returned [`Upload`] is installed or dropped.
    pub async fn receive(self: &Arc<Self>) -> Result<Upload, SystemError> {
        if !self.on_appliance() {
            return Err(self.not_on_appliance());
        }
        let previous = {
            let mut state = self.state.lock();
            if state.busy() {
                return Err(SystemError::Busy);
            }
            std::mem::replace(
                &mut *state,
                UpdateState::Receiving {
                    since: SystemTime::now(),
                },
            )
        };
        let path = self.upload_dir.join(UPLOAD_NAME);
        let mut upload = Upload {
            updater: self.clone(),
            path: path.clone(),
            file: None,
            written: 0,
            previous: Some(previous),
        };
        tokio::fs::create_dir_all(&self.upload_dir)
            .await
            .map_err(|e| SystemError::io("cannot make the upload directory", e))?;
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| SystemError::io("cannot store the upload", e))?;
        upload.file = Some(file);
        Ok(upload)
    }

    /// Whether a restart may be asked for now: not off the appliance, not
    /// while an update is under way. [`Updater::reboot`] checks it too;
    /// callers check it first to answer before the restart is asked for.
    pub fn can_reboot(&self) -> Result<(), SystemError> {
        if !self.on_appliance() {
            return Err(self.not_on_appliance());
        }
        if self.state.lock().busy() {
            return Err(SystemError::Busy);
        }
        Ok(())
    }

    /// Asks for a restart of the appliance by creating the reboot request
    /// file (the image's path unit reboots when it appears). Refused off
    /// the appliance and while an update is under way.
    pub async fn reboot(&self) -> Result<(), SystemError> {
        self.can_reboot()?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        tokio::fs::write(
            &self.settings.reboot_request,
            format!("restart requested at {now}\n"),
        )
        .await
        .map_err(|e| {
            SystemError::io(
                format!(
                    "cannot ask for a restart (writing {})",
                    self.settings.reboot_request.display()
                ),
                e,
            )
        })
    }

    /// Runs `rauc info --output-format=readable` on `bundle`: RAUC checks
    /// its signature with the appliance's keyring and prints the signed
    /// manifest. `Ok(Some(info))` when it did; `Err` with the refusal when
    /// RAUC refused the signature; `Ok(None)` when RAUC could not tell for
    /// another reason (it did not run, or could not read this bundle
    /// format without root): then `rauc install` checks the bundle, as it
    /// always does. Called by [`Updater::install`] first.
    async fn bundle_info(&self, bundle: &Path) -> Result<Option<BundleInfo>, Failure> {
        let args = [
            OsStr::new("info"),
            OsStr::new("--output-format=readable"),
            bundle.as_os_str(),
        ];
        let out = match self.rauc(&args, QUICK).await {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(error = %e, "rauc info did not run; rauc install checks the bundle");
                return Ok(None);
            }
        };
        if out.status.success() {
            let info = parse_info(&String::from_utf8_lossy(&out.stdout));
            if info.is_none() {
                tracing::warn!(
                    "rauc info printed no bundle description; rauc install checks the bundle"
                );
            }
            return Ok(info);
        }
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if bad_signature(&text.to_ascii_lowercase()) {
            return Err(explain_failure(&text, None));
        }
        tracing::warn!(output = %text.trim(), "rauc info failed; rauc install checks the bundle");
        Ok(None)
    }

    /// Checks a verity bundle's payload against the hash tree its
    /// signature vouches for ([`check_payload`], on a blocking thread):
    /// `Err` with the refusal when it does not match. Bundles without
    /// verity parameters pass (a plain bundle's payload RAUC checks whole
    /// before writing). Called by [`Updater::install`] after
    /// [`Updater::bundle_info`], before `rauc install`.
    async fn check_bundle(&self, bundle: &Path, info: Option<&BundleInfo>) -> Result<(), Failure> {
        let Some(info) = info else {
            return Ok(());
        };
        let Some(verity) = info.verity.clone() else {
            if info.verity_unreadable() {
                tracing::warn!(
                    format = ?info.format,
                    "rauc info gave no verity parameters: the payload is checked while RAUC writes it"
                );
            }
            return Ok(());
        };
        let path = bundle.to_path_buf();
        let started = Instant::now();
        let checked = tokio::task::spawn_blocking(move || check_payload(&path, &verity))
            .await
            .unwrap_or_else(|e| Err(VerityError::Io(std::io::Error::other(e))));
        let took_ms = started.elapsed().as_millis();
        match checked {
            Ok(()) => {
                tracing::info!(took_ms, "the bundle's payload matches its signed hash tree");
                Ok(())
            }
            Err(VerityError::Io(e)) => {
                tracing::warn!(error = %e, "cannot read the uploaded bundle for its check");
                Err(Failure {
                    refused: false,
                    reason: "the uploaded bundle could not be read for its check. Nothing was \
                             changed."
                        .into(),
                    detail: Some(e.to_string()),
                    detail_by: DetailBy::Check,
                })
            }
            Err(e) => {
                tracing::warn!(took_ms, error = %e, "the bundle's payload does not match its signature");
                Err(Failure {
                    refused: true,
                    reason: ALTERED.into(),
                    detail: Some(e.to_string()),
                    detail_by: DetailBy::Check,
                })
            }
        }
    }

    /// Records `failure` as the update's end and returns it as the
    /// install's error.
    fn fail(&self, failure: Failure) -> SystemError {
        self.set(UpdateState::Failed {
            at: SystemTime::now(),
            failure: failure.clone(),
        });
        SystemError::Install {
            message: failure.message(),
            refused: failure.refused,
        }
    }

    /// Installs `bundle` and records the outcome in the state: `rauc
    /// info`, the payload check, then `rauc install`. Called by
    /// [`Upload::install`].
    async fn install(&self, bundle: &Path) -> Result<Update, SystemError> {
        let before = self.status().await.ok();
        let slot = before
            .as_ref()
            .and_then(|s| s.other_slot())
            .map(|s| s.bootname.clone());
        let info = match self.bundle_info(bundle).await {
            Ok(info) => info,
            Err(failure) => {
                tracing::warn!(message = %failure.message(), "update refused by rauc info");
                return Err(self.fail(failure));
            }
        };
        let mut update = Update {
            version: info.as_ref().and_then(|i| i.version.clone()),
            slot,
        };
        self.set(UpdateState::Installing {
            since: SystemTime::now(),
            update: update.clone(),
        });
        if let Err(failure) = self.check_bundle(bundle, info.as_ref()).await {
            return Err(self.fail(failure));
        }
        tracing::info!(bundle = %bundle.display(), version = ?update.version, slot = ?update.slot, "installing an update bundle");
        let result = self
            .rauc(&[OsStr::new("install"), bundle.as_os_str()], INSTALL)
            .await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                return Err(self.fail(Failure {
                    refused: false,
                    reason: format!("the installation could not be run ({e})."),
                    detail: None,
                    detail_by: DetailBy::Rauc,
                }));
            }
        };
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            // What RAUC now records for the slot is the authority.
            if let Some(after) = self.status().await.ok().as_ref().and_then(|s| {
                update
                    .slot
                    .as_deref()
                    .and_then(|b| s.slot(b))
                    .or_else(|| s.other_slot())
                    .cloned()
            }) {
                update.slot = Some(after.bootname);
                if after.version.is_some() {
                    update.version = after.version;
                }
            }
            tracing::info!(version = ?update.version, slot = ?update.slot, "update installed");
            self.set(UpdateState::Installed {
                at: SystemTime::now(),
                update: update.clone(),
            });
            Ok(update)
        } else {
            let compatible = before.as_ref().and_then(|s| s.compatible.as_deref());
            tracing::warn!(output = %text.trim(), "update refused or failed");
            Err(self.fail(explain_failure(&text, compatible)))
        }
    }
}

/// A bundle being received (see [`Updater::receive`]). Dropping it
/// without [`Upload::install`] abandons the upload: the file is removed
/// and the state goes back to what it was.
#[derive(Debug)]
pub struct Upload {
    updater: Arc<Updater>,
    path: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
    /// The state before the upload, restored when it is abandoned;
    /// `None` once handed to the install.
    previous: Option<UpdateState>,
}

impl Upload {
    /// Where the bundle is stored.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes received so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends a piece of the bundle; [`SystemError::TooLarge`] past
    /// [`MAX_BUNDLE_BYTES`].
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), SystemError> {
        self.written += bytes.len() as u64;
        if self.written > MAX_BUNDLE_BYTES {
            return Err(SystemError::TooLarge {
                limit: MAX_BUNDLE_BYTES,
            });
        }
        let file = self.file.as_mut().ok_or_else(|| {
            SystemError::io("the upload is closed", std::io::ErrorKind::Other.into())
        })?;
        file.write_all(bytes)
            .await
            .map_err(|e| SystemError::io("cannot store the upload", e))
    }

    /// Installs the received bundle: run it in the background (it takes
    /// minutes); the state shows its progress and outcome, and the file
    /// is removed when it ends. An empty upload is refused at once.
    pub async fn install(mut self) -> Result<Update, SystemError> {
        let mut file = self.file.take();
        if let Some(f) = file.as_mut() {
            let flushed = async {
                f.flush().await?;
                f.sync_all().await
            }
            .await;
            if let Err(e) = flushed {
                return Err(SystemError::io("cannot store the upload", e));
            }
        }
        drop(file);
        if self.written == 0 {
            return Err(SystemError::Install {
                message: "Refused: the upload was empty. Nothing was changed.".into(),
                refused: true,
            });
        }
        self.previous = None;
        let updater = self.updater.clone();
        let path = self.path.clone();
        // `self` is dropped after the install: that removes the file.
        let result = updater.install(&path).await;
        drop(self);
        result
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.file = None;
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the update upload");
            }
        }
        if let Some(previous) = self.previous.take() {
            self.updater.set(previous);
        }
    }
}

/// The last non-empty line of a text.
fn last_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_string)
}

/// Whether RAUC's output (in lower case) says the bundle's signature is
/// not valid: what `rauc info` and `rauc install` print then.
fn bad_signature(lower: &str) -> bool {
    lower.contains("signature verification failed")
        || lower.contains("verify error")
        || lower.contains("invalid signature")
        || lower.contains("signature size")
        || lower.contains("no signature")
        || lower.contains("failed to verify")
}

/// Explains a failed `rauc install` (or `rauc info`) from its output
/// (stdout and stderr): RAUC prints its error as `LastError: ...` and
/// ends with ``Installing `PATH` failed``. `compatible` is the
/// appliance's own, when known.
pub fn explain_failure(output: &str, compatible: Option<&str>) -> Failure {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let detail = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("LastError:").map(str::trim))
        .or_else(|| {
            lines.iter().rev().copied().find(|l| {
                let raucs_verdict = l.starts_with("Installing `") && l.ends_with("failed");
                let progress = l.ends_with("failed.");
                !raucs_verdict && !progress
            })
        })
        .map(str::to_string);
    let lower = output.to_ascii_lowercase();
    let refused = |reason: String| Failure {
        refused: true,
        reason,
        detail: detail.clone(),
        detail_by: DetailBy::Rauc,
    };
    if bad_signature(&lower) {
        return refused(
            "the update bundle's signature is not valid for this appliance. Nothing was changed."
                .into(),
        );
    }
    if lower.contains("compatible mismatch") {
        let theirs = output
            .split("bundle manifest has '")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .filter(|s| !s.is_empty());
        let reason = match (theirs, compatible) {
            (Some(t), Some(c)) => format!(
                "the update bundle is for another kind of device ({t}; this appliance is {c}). \
                 Nothing was changed."
            ),
            (Some(t), None) => format!(
                "the update bundle is for another kind of device ({t}). Nothing was changed."
            ),
            _ => "the update bundle is for another kind of device. Nothing was changed.".into(),
        };
        return refused(reason);
    }
    if lower.contains("already in progress") || lower.contains("busy") {
        return refused(
            "RAUC is busy with another installation. Nothing was changed; try again later.".into(),
        );
    }
    if lower.contains("failed to open bundle")
        || lower.contains("not a valid bundle")
        || lower.contains("failed to load bundle")
        || lower.contains("squashfs")
    {
        return refused("the file is not a readable update bundle. Nothing was changed.".into());
    }
    Failure {
        refused: false,
        detail_by: DetailBy::Rauc,
        reason: "the installation did not complete. The running system is unchanged; the other \
                 slot is not booted until an installation into it succeeds."
            .into(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_the_environment_override_the_defaults() {
        let s = Settings::from_lookup(|name| match name {
            "UAGATE_RAUC" => Some("/opt/fake/rauc".into()),
            "UAGATE_OS_RELEASE" => Some("".into()),
            _ => None,
        });
        assert_eq!(s.rauc, PathBuf::from("/opt/fake/rauc"));
        assert_eq!(s.os_release, PathBuf::from("/etc/os-release"));
        assert_eq!(s.reboot_request, PathBuf::from("/run/uagate/reboot"));
    }

    #[test]
    fn a_bad_signature_is_a_refusal_with_raucs_line() {
        let out = "installing\n  0% Installing\n 20% Checking bundle\n 20% Verifying signature\n \
                   40% Verifying signature failed.\n100% Installing failed.\n\
                   LastError: signature verification failed: Verify error:self-signed certificate in certificate chain\n\
                   Installing `/var/lib/uagate/updates/upload.raucb` failed\n";
        let f = explain_failure(out, Some("uagate-appliance-x86_64"));
        assert!(f.refused);
        assert_eq!(
            f.message(),
            "Refused: the update bundle's signature is not valid for this appliance. Nothing was \
             changed. RAUC: signature verification failed: Verify error:self-signed certificate \
             in certificate chain"
        );
    }

    #[test]
    fn another_devices_bundle_says_whose_it_is() {
        let out = "LastError: Failed to check bundle: Compatible mismatch: Expected \
                   'uagate-appliance-x86_64' but bundle manifest has 'acme-router'\n\
                   Installing `/x.raucb` failed\n";
        let f = explain_failure(out, Some("uagate-appliance-x86_64"));
        assert!(f.refused);
        assert!(
            f.reason.starts_with(
                "the update bundle is for another kind of device (acme-router; this appliance \
                 is uagate-appliance-x86_64)"
            ),
            "{}",
            f.reason
        );
    }

    #[test]
    fn other_failures_keep_raucs_last_line() {
        let f = explain_failure(
            "100% Installing failed.\nLastError: Installation error: Failed updating slot rootfs.1: write error\nInstalling `/x` failed\n",
            None,
        );
        assert!(!f.refused);
        assert_eq!(
            f.detail.as_deref(),
            Some("Installation error: Failed updating slot rootfs.1: write error")
        );
        assert!(f
            .message()
            .starts_with("Failed: the installation did not complete."));
    }

    #[test]
    fn state_messages_read_at_a_glance() {
        let update = Update {
            version: Some("0.2.0".into()),
            slot: Some("B".into()),
        };
        let now = SystemTime::now();
        assert_eq!(UpdateState::Idle.message(), None);
        assert_eq!(
            UpdateState::Installing {
                since: now,
                update: update.clone()
            }
            .message()
            .as_deref(),
            Some("Installing uagate 0.2.0 into slot B…")
        );
        assert_eq!(
            UpdateState::Installed { at: now, update }
                .message()
                .as_deref(),
            Some("Installed 0.2.0 into slot B. Restart the appliance to use it.")
        );
        assert_eq!(
            UpdateState::Installing {
                since: now,
                update: Update::default()
            }
            .message()
            .as_deref(),
            Some("Installing the update…")
        );
    }
}
