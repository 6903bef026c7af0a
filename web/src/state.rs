//! What every handler shares: the store, the running engine, the token
//! keys and the login throttle, in one cheaply cloned [`WebState`].

use std::sync::Arc;

use uagate_server::Engine;
use uagate_store::Store;

use uagate_server::throttle::LoginThrottle;

use crate::auth::TokenKeys;

/// The directory under the data directory that receives update bundles.
pub const UPDATES_DIR: &str = "updates";

/// What every handler shares; cheap to clone.
#[derive(Clone)]
pub struct WebState {
    /// The configuration store (users, documents, change log).
    pub store: Store,
    /// The running gateway.
    pub engine: Arc<Engine>,
    /// Signs and checks tokens.
    pub keys: Arc<TokenKeys>,
    /// Failed-login counting: the engine's, so OPC UA and console logins
    /// count against each other.
    pub throttle: Arc<LoginThrottle>,
    /// Serialises changes of the configuration document, so two editors
    /// never lose each other's change.
    pub config_lock: Arc<tokio::sync::Mutex<()>>,
    /// The one-time code that lets the first administrator be created;
    /// set while the store has no user (see [`WebState::prepare_setup`]).
    pub setup_code: Arc<parking_lot::Mutex<Option<String>>>,
    /// This appliance's pair node, for the Pair page's actions (invite,
    /// join, leave, promote); `None` where no pair node runs.
    pub pair: Option<Arc<uagate_pair::PairNode>>,
    /// The appliance image underneath: RAUC's slots, the update in
    /// progress, the restart request (the System page and
    /// `/api/v1/system`).
    pub system: Arc<uagate_system::Updater>,
    /// Where the setup code is also written for the login prompt of the
    /// appliance's local console (`UAGATE_SETUP_ISSUE`, an agetty issue
    /// file); removed once the first administrator exists.
    pub setup_notice: Option<std::path::PathBuf>,
    /// The console's TCP port, for the address in the setup notice.
    pub console_port: u16,
    /// Who set the ServiceLevel override last and when it ends (see
    /// [`crate::ops::override_level`]).
    pub level_override: Arc<parking_lot::Mutex<Option<crate::ops::OverrideNote>>>,
}

impl WebState {
    /// State for the console of `engine`, with token keys from `data_dir`.
    pub fn new(
        store: Store,
        engine: Arc<Engine>,
        data_dir: &std::path::Path,
    ) -> std::io::Result<WebState> {
        let throttle = engine.login_throttle();
        Ok(WebState {
            store,
            engine,
            keys: Arc::new(TokenKeys::load_or_create(data_dir)?),
            throttle,
            setup_code: Arc::default(),
            config_lock: Arc::default(),
            pair: None,
            // No RAUC until `with_system` says where it is.
            system: Arc::new(uagate_system::Updater::new(
                uagate_system::Settings::absent(),
                data_dir.join(UPDATES_DIR),
            )),
            setup_notice: None,
            console_port: 8443,
            level_override: Arc::default(),
        })
    }

    /// The same state with the updater's `settings` (where `rauc`, the
    /// os-release file and the reboot request file are): `uagate run`
    /// passes [`uagate_system::Settings::from_env`], tests their own.
    /// Bundles are received into `<data dir>/updates`.
    pub fn with_system(
        mut self,
        settings: uagate_system::Settings,
        data_dir: &std::path::Path,
    ) -> WebState {
        self.system = Arc::new(uagate_system::Updater::new(
            settings,
            data_dir.join(UPDATES_DIR),
        ));
        self
    }

    /// The same state writing the setup code to `path` too (see
    /// [`WebState::setup_notice`]) with the console's `port`; `uagate run`
    /// passes `UAGATE_SETUP_ISSUE`.
    pub fn with_setup_notice(mut self, path: Option<std::path::PathBuf>, port: u16) -> WebState {
        self.setup_notice = path;
        self.console_port = port;
        self
    }

    /// Called once when the console starts: when no user exists yet, makes
    /// a one-time setup code (printed to the log by the caller) with which
    /// `POST /api/v1/setup` creates the first admin. `None` once users exist.
    pub async fn prepare_setup(&self) -> Result<Option<String>, uagate_store::StoreError> {
        if !self.store.list_users().await?.is_empty() {
            return Ok(None);
        }
        let code = hex::encode(rand::random::<[u8; 8]>());
        *self.setup_code.lock() = Some(code.clone());
        if let Some(path) = &self.setup_notice {
            // agetty shows this under its banner; it replaces \4 by the
            // appliance's IPv4 address.
            let port = self.console_port;
            let notice = format!(
                "No console user yet. Open https://\\4:{port}/setup and enter the\n\
                 setup code {code} to create the first administrator.\n\n"
            );
            if let Err(e) = std::fs::write(path, notice) {
                tracing::warn!(path = %path.display(), "cannot write the setup notice: {e}");
            }
        }
        Ok(Some(code))
    }

    /// Called once the first administrator exists: the setup code is spent,
    /// so the login prompt stops showing it.
    pub fn setup_done(&self) {
        *self.setup_code.lock() = None;
        if let Some(path) = &self.setup_notice {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot remove the setup notice: {e}")
                }
            }
        }
    }
}
