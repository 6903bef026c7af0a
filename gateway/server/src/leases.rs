//! The resource-isolation charges a channel holds while the protocol core
//! works for it: the Handshake charge of an OpenSecureChannel (Renew), and
//! the ReassemblyBytes charges of the intermediate chunks of a message.
//! Set on the connection by its driver when the channel opens.

use std::sync::Arc;

use uagate_config::Stage;
use uagate_isolation::owner::OwnerClass;
use uagate_isolation::provider::Lease;
use uagate_proto::{ReassemblyBudget, RenewGate};

use crate::admission::Caller;
use crate::Engine;

/// Charges OpenSecureChannel(Renew) work to the Handshake stage while it
/// is processed (resource isolation).
pub(crate) struct RenewLease {
    engine: Arc<Engine>,
    caller: Caller,
    lease: Option<Lease>,
}

impl RenewLease {
    /// The renew gate of a channel of `caller`; set when the channel opens.
    pub(crate) fn new(engine: Arc<Engine>, caller: Caller) -> Self {
        RenewLease {
            engine,
            caller,
            lease: None,
        }
    }
}

impl RenewGate for RenewLease {
    fn try_begin(&mut self) -> bool {
        self.lease = self
            .engine
            .pipeline
            .admission()
            .acquire(Stage::Handshake, &self.caller, 1)
            .ok();
        self.lease.is_some()
    }

    fn end(&mut self) {
        self.lease = None;
    }
}

/// The ReassemblyBytes budget of one channel: one lease per retained
/// intermediate chunk (a lease cannot grow), all dropped when the protocol
/// layer releases the message, and with the connection.
///
/// Who is charged is decided when a message starts and kept for the rest of
/// that message: the connection's caller, except that an ordinary caller
/// whose channel carries an activated Session is charged as
/// [`OwnerClass::SessionBound`] (it may use the reconnect reserve at this
/// stage only). Protected and trusted callers keep their own class. In
/// shared_only (no reserves, every caller ordinary) the same split decides
/// which charges count against `isolation.max_bytes_without_session`: the
/// ordinary ones.
pub(crate) struct ReassemblyLeases {
    engine: Arc<Engine>,
    caller: Caller,
    channel_id: u32,
    /// The caller for the message being reassembled.
    current: Caller,
    leases: Vec<Lease>,
}

impl ReassemblyLeases {
    /// The budget of channel `channel_id` of `caller`; set when the
    /// channel opens.
    pub(crate) fn new(engine: Arc<Engine>, caller: Caller, channel_id: u32) -> Self {
        ReassemblyLeases {
            engine,
            current: caller.clone(),
            caller,
            channel_id,
            leases: Vec::new(),
        }
    }

    /// The caller a message starting now is charged to.
    fn caller_for_message(&self) -> Caller {
        if !matches!(self.caller.class, OwnerClass::Ordinary) {
            return self.caller.clone();
        }
        let session_bound = self.engine.sessions.has_active_session(self.channel_id);
        Caller {
            owner: self.caller.owner.clone(),
            class: if session_bound {
                OwnerClass::SessionBound
            } else {
                OwnerClass::Ordinary
            },
        }
    }
}

impl ReassemblyBudget for ReassemblyLeases {
    fn reserve(&mut self, bytes: usize, message_start: bool) -> bool {
        if message_start {
            self.leases.clear();
            self.current = self.caller_for_message();
        }
        match self.engine.pipeline.admission().acquire(
            Stage::ReassemblyBytes,
            &self.current,
            bytes as u64,
        ) {
            Ok(lease) => {
                self.leases.push(lease);
                true
            }
            Err(rejection) => {
                tracing::debug!(
                    channel = self.channel_id,
                    class = self.current.class.label(),
                    bytes,
                    %rejection,
                    "intermediate chunk refused"
                );
                false
            }
        }
    }

    fn release(&mut self) {
        self.leases.clear();
    }
}
