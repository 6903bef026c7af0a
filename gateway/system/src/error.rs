//! The crate's one error type.

/// Why a system operation (status, install, reboot) did not happen. The
/// messages are written for an operator: the console and REST show them
/// as they are.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemError {
    /// The `rauc` program is not there: this gateway is not running on the
    /// appliance image. Returned by every operation that needs RAUC.
    #[error(
        "this gateway is not running on the appliance image (no RAUC program): it is updated \
         by replacing the uagate program"
    )]
    NotOnAppliance {
        /// Where the program was looked for.
        program: String,
    },
    /// An update is being received or installed already; one at a time.
    #[error("an update is being installed already: wait until it has finished")]
    Busy,
    /// The uploaded bundle is larger than [`crate::MAX_BUNDLE_BYTES`].
    #[error("the update bundle is larger than {limit} bytes")]
    TooLarge {
        /// The most bytes accepted.
        limit: u64,
    },
    /// `rauc status` failed or printed something that is not its JSON.
    #[error("RAUC did not report the slots: {0}")]
    Status(String),
    /// RAUC refused or failed the installation; the message says why in
    /// an operator's words, followed by RAUC's own line.
    #[error("{message}")]
    Install {
        /// What happened, for an operator.
        message: String,
        /// Whether RAUC refused the bundle before writing anything (bad
        /// signature, another device's bundle): nothing was changed.
        refused: bool,
    },
    /// Reading or writing a file (the upload, the reboot request) or
    /// starting a program failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl SystemError {
    /// An IO error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> SystemError {
        SystemError::Io {
            what: what.into(),
            source,
        }
    }
}
