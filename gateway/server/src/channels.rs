//! The engine's secure channels part: the ids handed out to new channels,
//! where each open channel takes responses produced outside its request
//! flow, and the registry of connections that could be reclaimed at
//! capacity.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use opcua_core::ResponseMessage;
use opcua_types::{ByteString, StatusCode};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uagate_isolation::FastMap;

use crate::dispatch::Reply;
use crate::reclaim::Reclaimer;

/// The channel id of the opc.https logical channel; UACP channels are
/// numbered after it.
pub(crate) const HTTPS_CHANNEL: u32 = 1;

/// The open secure channels of the engine (every transport).
pub(crate) struct Channels {
    /// The id the next opened channel gets.
    next_id: AtomicU32,
    /// Where to send responses produced outside the request/response flow
    /// (Publish answered by the subscription timer), by channel id.
    responders: Mutex<FastMap<u32, mpsc::Sender<Reply>>>,
    /// Live connections and which of them could be reclaimed at capacity.
    reclaimer: Reclaimer,
    /// Connections closed because the peer stopped reading (see
    /// [`crate::driver::SEND_STALL`]).
    send_stalls: AtomicU64,
    /// The open channels secured with a client certificate, so that a
    /// channel whose certificate the trust list refuses now can be closed
    /// ([`crate::standing`]).
    certified: Mutex<FastMap<u32, Certified>>,
}

/// An open channel secured with a client certificate.
struct Certified {
    /// The client certificate (DER) it was opened with.
    cert: ByteString,
    /// Cancels its connection.
    cancel: CancellationToken,
    /// Set by [`Channels::refuse`]: the status its connection closes with.
    refused: Option<StatusCode>,
}

impl Channels {
    /// The channels at start: only the opc.https logical channel
    /// ([`HTTPS_CHANNEL`]), answered through `https`. Called once by
    /// [`crate::start`].
    pub(crate) fn new(https: mpsc::Sender<Reply>) -> Channels {
        Channels {
            next_id: AtomicU32::new(HTTPS_CHANNEL + 1),
            responders: Mutex::new([(HTTPS_CHANNEL, https)].into_iter().collect()),
            reclaimer: Reclaimer::default(),
            send_stalls: AtomicU64::new(0),
            certified: Mutex::new(FastMap::default()),
        }
    }

    /// Counts a connection closed because its peer stopped reading; called
    /// by the connection driver.
    pub(crate) fn count_send_stall(&self) {
        self.send_stalls.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections closed so far because their peer stopped reading.
    pub(crate) fn send_stalls(&self) -> u64 {
        self.send_stalls.load(Ordering::Relaxed)
    }

    /// A fresh channel id; called for every OpenSecureChannel (Issue).
    pub(crate) fn allocate_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records where channel `channel_id` takes its later responses; called
    /// by its connection driver when the channel opens.
    pub(crate) fn open(&self, channel_id: u32, responder: mpsc::Sender<Reply>) {
        self.responders.lock().insert(channel_id, responder);
    }

    /// Records that channel `channel_id` was opened with client certificate
    /// `cert` on the connection `cancel` ends; called by its connection
    /// driver when a secured channel opens, and for an opc.https connection
    /// with a TLS client certificate (under an id of its own).
    pub(crate) fn certify(&self, channel_id: u32, cert: ByteString, cancel: CancellationToken) {
        self.certified.lock().insert(
            channel_id,
            Certified {
                cert,
                cancel,
                refused: None,
            },
        );
    }

    /// The open channels secured with a client certificate, and that
    /// certificate; read by the re-check of the trust list.
    pub(crate) fn certificates(&self) -> Vec<(u32, ByteString)> {
        self.certified
            .lock()
            .iter()
            .map(|(id, c)| (*id, c.cert.clone()))
            .collect()
    }

    /// Closes channel `channel_id` because its client certificate is
    /// refused now: its connection sends an Error message with `status`
    /// and closes. Returns whether the channel was still open.
    pub(crate) fn refuse(&self, channel_id: u32, status: StatusCode) -> bool {
        let mut certified = self.certified.lock();
        let Some(c) = certified.get_mut(&channel_id) else {
            return false;
        };
        c.refused = Some(status);
        c.cancel.cancel();
        true
    }

    /// Why channel `channel_id` was refused ([`Channels::refuse`]), asked
    /// by its connection when its cancellation fires.
    pub(crate) fn refused(&self, channel_id: u32) -> Option<StatusCode> {
        self.certified
            .lock()
            .get(&channel_id)
            .and_then(|c| c.refused)
    }

    /// Forgets channel `channel_id`; called when its connection ends.
    pub(crate) fn close(&self, channel_id: u32) {
        self.responders.lock().remove(&channel_id);
        self.certified.lock().remove(&channel_id);
    }

    /// Where channel `channel_id` takes its responses, while it is open;
    /// called by the dispatcher for every answered request.
    pub(crate) fn responder(&self, channel_id: u32) -> Option<mpsc::Sender<Reply>> {
        self.responders.lock().get(&channel_id).cloned()
    }

    /// Queues a response to request `request_id` of channel `channel_id`
    /// without waiting; dropped (with a warning) when the channel is gone
    /// or its queue is full.
    pub(crate) fn send_later(&self, channel_id: u32, request_id: u32, response: ResponseMessage) {
        if let Some(tx) = self.responders.lock().get(&channel_id) {
            if tx.try_send((request_id, response, None)).is_err() {
                tracing::warn!(
                    channel = channel_id,
                    "response dropped: channel gone or busy"
                );
            }
        }
    }

    /// The live connections and their quiet state (reclaiming at capacity).
    pub(crate) fn reclaimer(&self) -> &Reclaimer {
        &self.reclaimer
    }
}
