//! Per-owner shares of the request pipeline (fair scheduling): a
//! connection claims a slot for the requests of each read before it
//! decodes them, and waits while its owner is at its share. Enforced where
//! connections read, so an owner over its share leaves its bytes in the
//! socket instead of in the server.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use uagate_isolation::owner::OwnerKey;
use uagate_isolation::shares::{Claim, PipelineShares};

/// The pipeline shares with a wake-up handle per owner: connections of an
/// owner at its share wait on it and are signalled one at a time.
pub(crate) struct Flows {
    table: Mutex<PipelineShares<Arc<tokio::sync::Notify>>>,
}

/// One request of an owner inside the server, from the read that decoded
/// it until its response is encoded (or it is refused or parks). Dropping
/// it releases the owner's pipeline slot and wakes a waiting connection.
pub(crate) struct FlowClaim {
    flows: Arc<Flows>,
    owner: OwnerKey,
}

impl Drop for FlowClaim {
    fn drop(&mut self) {
        let wake = self.flows.table.lock().release(Instant::now(), &self.owner);
        for w in wake {
            w.notify_one();
        }
    }
}

/// A connection's wait for its owner to drop below its share.
pub(crate) struct FlowWait {
    flows: Arc<Flows>,
    owner: OwnerKey,
    notify: Arc<tokio::sync::Notify>,
}

impl FlowWait {
    /// Resolves when the owner may have room again (re-check with a claim).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl Drop for FlowWait {
    fn drop(&mut self) {
        let wake = self
            .flows
            .table
            .lock()
            .stop_waiting(Instant::now(), &self.owner);
        for w in wake {
            w.notify_one();
        }
    }
}

impl Flows {
    /// Shares of `capacity` requests (the shared RequestExecution capacity).
    pub(crate) fn new(capacity: u64) -> Arc<Flows> {
        Arc::new(Flows {
            table: Mutex::new(PipelineShares::new(capacity)),
        })
    }

    /// Called when a connection of `owner` has bytes to read: a claim for
    /// the request they will carry, or a wait when the owner is at its share.
    pub(crate) fn try_claim(
        self: &Arc<Self>,
        owner: &OwnerKey,
        weight: u32,
        reserved: u64,
    ) -> Result<FlowClaim, FlowWait> {
        let claim = self
            .table
            .lock()
            .try_claim(Instant::now(), owner, weight, reserved);
        match claim {
            Claim::Granted => Ok(FlowClaim {
                flows: self.clone(),
                owner: owner.clone(),
            }),
            Claim::Wait(notify) => Err(FlowWait {
                flows: self.clone(),
                owner: owner.clone(),
                notify,
            }),
        }
    }

    /// A claim for a further request decoded from the same read.
    pub(crate) fn add(self: &Arc<Self>, owner: &OwnerKey, weight: u32, reserved: u64) -> FlowClaim {
        self.table.lock().add(owner, weight, reserved);
        FlowClaim {
            flows: self.clone(),
            owner: owner.clone(),
        }
    }
}
