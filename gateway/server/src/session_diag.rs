//! The per-session diagnostics of Part 5 (12.10 SessionDiagnosticsDataType,
//! 12.11 SessionSecurityDiagnosticsDataType) shown in
//! Server/ServerDiagnostics/SessionsDiagnosticsSummary: what a client said
//! when it created and activated its session, and its requests counted by
//! service. Pure data: the session table keeps one [`ClientRecord`] per
//! session; once a second it takes a [`Snapshot`] of each under its lock
//! (cheap: the fixed part is shared) and the arrays are built from the
//! snapshots after the lock is released, so that thousands of sessions do
//! not hold up requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_core::RequestMessage;
use opcua_types::{
    ApplicationDescription, ByteString, DateTime, MessageSecurityMode, NodeId,
    ServiceCounterDataType, SessionDiagnosticsDataType, SessionSecurityDiagnosticsDataType,
    StatusCode, UAString,
};

use crate::session::{Session, UserIdentity};
use crate::stats::SERVICES;

/// Services the diagnostics count that [`SERVICES`] (the metrics' label
/// set) leaves under "other": each has a slot after those of [`SERVICES`].
const UNLISTED: [&str; 4] = [
    "AddReferences",
    "DeleteNodes",
    "DeleteReferences",
    "QueryNext",
];

/// Slots of [`ClientRecord`]'s counts.
const SLOTS: usize = SERVICES.len() + UNLISTED.len();

/// The slot of request `r`, whose index in [`SERVICES`] is `service`:
/// that index, or one of [`UNLISTED`]. Called for every request of a
/// session (one match).
pub fn slot(service: usize, r: &RequestMessage) -> usize {
    if service != SERVICES.len() - 1 {
        return service;
    }
    let unlisted = match r {
        RequestMessage::AddReferences(_) => 0,
        RequestMessage::DeleteNodes(_) => 1,
        RequestMessage::DeleteReferences(_) => 2,
        RequestMessage::QueryNext(_) => 3,
        _ => return service,
    };
    SERVICES.len() + unlisted
}

/// What a session's diagnostics report that is fixed at CreateSession.
#[derive(Debug, Default)]
pub struct ClientFixed {
    /// The client's ApplicationDescription.
    pub description: ApplicationDescription,
    /// The session name the client chose.
    pub session_name: UAString,
    /// The serverUri the client asked for.
    pub server_uri: UAString,
    /// The endpointUrl the client used.
    pub endpoint_url: UAString,
    /// The largest response the client takes (0: no limit).
    pub max_response_message_size: u32,
    /// When the session was created.
    pub connected: DateTime,
    /// The channel's security policy URI.
    pub security_policy_uri: UAString,
    /// The client's application certificate (null on None).
    pub certificate: ByteString,
}

/// What one session's diagnostics report beyond the session's other
/// fields. Made at CreateSession ([`ClientRecord::new`]); changed by
/// ActivateSession ([`ClientRecord::activated`]) and counted for every
/// answered request of the session ([`ClientRecord::count`]).
#[derive(Debug)]
pub struct ClientRecord {
    /// Fixed at CreateSession; shared with the snapshots.
    pub fixed: Arc<ClientFixed>,
    /// The locales of the last ActivateSession.
    pub locale_ids: Vec<UAString>,
    /// Every user the session was activated for, oldest first.
    pub user_history: Vec<UAString>,
    /// Requests answered, by [`slot`]: (total, Bad service result).
    counts: [(u32, u32); SLOTS],
    /// Requests refused because the user may not do them.
    unauthorized: u32,
}

impl Default for ClientRecord {
    fn default() -> Self {
        Self::new(ClientFixed::default())
    }
}

impl ClientRecord {
    /// The record of a session created now, with what CreateSession fixed.
    pub fn new(fixed: ClientFixed) -> Self {
        Self {
            fixed: Arc::new(fixed),
            locale_ids: Vec::new(),
            user_history: Vec::new(),
            counts: [(0, 0); SLOTS],
            unauthorized: 0,
        }
    }

    /// Called by a successful ActivateSession: its locales and user.
    pub fn activated(&mut self, locale_ids: Vec<UAString>, identity: &UserIdentity) {
        self.locale_ids = locale_ids;
        let user = user_id(identity);
        if self.user_history.last() != Some(&user) {
            self.user_history.push(user);
        }
    }

    /// Counts one answered request in `slot` (see [`slot`]) with its
    /// service result.
    pub fn count(&mut self, slot: usize, status: StatusCode) {
        if let Some((total, errors)) = self.counts.get_mut(slot) {
            *total = total.saturating_add(1);
            if status.is_bad() {
                *errors = errors.saturating_add(1);
            }
        }
        if matches!(
            status,
            StatusCode::BadUserAccessDenied | StatusCode::BadSecurityModeInsufficient
        ) {
            self.unauthorized = self.unauthorized.saturating_add(1);
        }
    }
}

/// How the user of a session is named in the security diagnostics: the
/// login name, the user certificate's thumbprint, or empty (anonymous).
fn user_id(identity: &UserIdentity) -> UAString {
    match identity {
        UserIdentity::Anonymous => UAString::null(),
        UserIdentity::User { name, .. } => name.as_str().into(),
        UserIdentity::Certificate { thumbprint } => thumbprint.as_str().into(),
    }
}

/// One session's diagnostics at one moment, taken under the session
/// table's lock by [`Snapshot::of`] and turned into the OPC UA structures
/// after it is released.
#[derive(Debug)]
pub struct Snapshot {
    session_id: NodeId,
    fixed: Arc<ClientFixed>,
    locale_ids: Vec<UAString>,
    user_history: Vec<UAString>,
    counts: [(u32, u32); SLOTS],
    unauthorized: u32,
    timeout: Duration,
    /// How long before the snapshot the client's last request came.
    since_contact: Duration,
    subscriptions: usize,
    monitored_items: usize,
    queued_publish: usize,
    identity: Option<UserIdentity>,
    transport: &'static str,
    security_mode: &'static str,
}

impl Snapshot {
    /// The snapshot of `session` at `instant`.
    pub fn of(session: &Session, instant: Instant) -> Self {
        let c = &session.client;
        let subs = &session.subscriptions;
        Self {
            session_id: session.id.clone(),
            fixed: c.fixed.clone(),
            locale_ids: c.locale_ids.clone(),
            user_history: c.user_history.clone(),
            counts: c.counts,
            unauthorized: c.unauthorized,
            timeout: session.timeout,
            since_contact: instant.saturating_duration_since(session.last_activity),
            subscriptions: subs.subscription_count(),
            monitored_items: subs.monitored_item_count(),
            queued_publish: subs.pending_publish_count(),
            identity: session.identity().cloned(),
            transport: session.origin.transport,
            security_mode: session.origin.security_mode,
        }
    }

    /// The counter of the service named `name` (one of [`SERVICES`] or
    /// [`UNLISTED`]).
    fn counter(&self, name: &str) -> ServiceCounterDataType {
        counter(&self.counts, name)
    }

    /// The SessionDiagnosticsDataType, `now` being the snapshot's moment.
    pub fn session_diagnostics(&self, now: DateTime) -> SessionDiagnosticsDataType {
        let f = &self.fixed;
        let last_contact = chrono::Duration::from_std(self.since_contact)
            .map(|d| DateTime::from(now.as_chrono() - d))
            .unwrap_or(now);
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        SessionDiagnosticsDataType {
            session_id: self.session_id.clone(),
            session_name: f.session_name.clone(),
            client_description: f.description.clone(),
            server_uri: f.server_uri.clone(),
            endpoint_url: f.endpoint_url.clone(),
            locale_ids: Some(self.locale_ids.clone()),
            actual_session_timeout: self.timeout.as_secs_f64() * 1000.0,
            max_response_message_size: f.max_response_message_size,
            client_connection_time: f.connected,
            client_last_contact_time: last_contact,
            current_subscriptions_count: n(self.subscriptions),
            current_monitored_items_count: n(self.monitored_items),
            current_publish_requests_in_queue: n(self.queued_publish),
            total_request_count: total(&self.counts),
            unauthorized_request_count: self.unauthorized,
            read_count: self.counter("Read"),
            history_read_count: self.counter("HistoryRead"),
            write_count: self.counter("Write"),
            history_update_count: self.counter("HistoryUpdate"),
            call_count: self.counter("Call"),
            create_monitored_items_count: self.counter("CreateMonitoredItems"),
            modify_monitored_items_count: self.counter("ModifyMonitoredItems"),
            set_monitoring_mode_count: self.counter("SetMonitoringMode"),
            set_triggering_count: self.counter("SetTriggering"),
            delete_monitored_items_count: self.counter("DeleteMonitoredItems"),
            create_subscription_count: self.counter("CreateSubscription"),
            modify_subscription_count: self.counter("ModifySubscription"),
            set_publishing_mode_count: self.counter("SetPublishingMode"),
            publish_count: self.counter("Publish"),
            republish_count: self.counter("Republish"),
            transfer_subscriptions_count: self.counter("TransferSubscriptions"),
            delete_subscriptions_count: self.counter("DeleteSubscriptions"),
            // The gateway takes no node management or query services; they
            // are answered BadServiceUnsupported, and counted.
            add_nodes_count: self.counter("AddNodes"),
            add_references_count: self.counter("AddReferences"),
            delete_nodes_count: self.counter("DeleteNodes"),
            delete_references_count: self.counter("DeleteReferences"),
            browse_count: self.counter("Browse"),
            browse_next_count: self.counter("BrowseNext"),
            translate_browse_paths_to_node_ids_count: self.counter("TranslateBrowsePathsToNodeIds"),
            query_first_count: self.counter("QueryFirst"),
            query_next_count: self.counter("QueryNext"),
            register_nodes_count: self.counter("RegisterNodes"),
            unregister_nodes_count: self.counter("UnregisterNodes"),
        }
    }

    /// The SessionSecurityDiagnosticsDataType.
    pub fn session_security_diagnostics(&self) -> SessionSecurityDiagnosticsDataType {
        let identity = self.identity.as_ref();
        SessionSecurityDiagnosticsDataType {
            session_id: self.session_id.clone(),
            client_user_id_of_session: identity.map(user_id).unwrap_or_default(),
            client_user_id_history: Some(self.user_history.clone()),
            // The lexical names of UserTokenType (Part 5 12.11).
            authentication_mechanism: match identity {
                Some(UserIdentity::User { .. }) => "UserName",
                Some(UserIdentity::Certificate { .. }) => "Certificate",
                Some(UserIdentity::Anonymous) => "Anonymous",
                None => "",
            }
            .into(),
            encoding: "UA Binary".into(),
            transport_protocol: transport_profile(self.transport).into(),
            security_mode: match self.security_mode {
                "Sign" => MessageSecurityMode::Sign,
                "SignAndEncrypt" => MessageSecurityMode::SignAndEncrypt,
                _ => MessageSecurityMode::None,
            },
            security_policy_uri: self.fixed.security_policy_uri.clone(),
            client_certificate: self.fixed.certificate.clone(),
        }
    }
}

/// The counter of the service named `name` (one of [`SERVICES`] or
/// [`UNLISTED`]) in `counts`.
fn counter(counts: &[(u32, u32); SLOTS], name: &str) -> ServiceCounterDataType {
    let (total_count, error_count) = SERVICES
        .iter()
        .chain(UNLISTED.iter())
        .position(|s| *s == name)
        .map_or((0, 0), |i| counts[i]);
    ServiceCounterDataType {
        total_count,
        error_count,
    }
}

/// All requests in `counts`, whatever the service.
fn total(counts: &[(u32, u32); SLOTS]) -> ServiceCounterDataType {
    let (total_count, error_count) = counts.iter().fold((0u32, 0u32), |(t, e), (ct, ce)| {
        (t.saturating_add(*ct), e.saturating_add(*ce))
    });
    ServiceCounterDataType {
        total_count,
        error_count,
    }
}

/// The transport profile URI (Part 7) of a transport scheme.
fn transport_profile(transport: &str) -> &'static str {
    match transport {
        "opc.wss" => "http://opcfoundation.org/UA-Profile/Transport/wss-uasc-uabinary",
        "opc.https" => "http://opcfoundation.org/UA-Profile/Transport/https-uabinary",
        _ => "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::{CloseSessionRequest, QueryNextRequest, ReadRequest};

    /// The slot a request is counted in, as [`crate::Engine`] finds it.
    fn slot_of(r: &RequestMessage) -> usize {
        slot(crate::stats::service_index(r), r)
    }

    /// Requests are counted by service, errors apart; a refusal of the
    /// user's rights is also an unauthorized request; services outside the
    /// metrics' label set (QueryNext) have their own counter.
    #[test]
    fn requests_are_counted_by_service_and_outcome() {
        let mut record = ClientRecord::default();
        let read = slot_of(&RequestMessage::Read(Box::<ReadRequest>::default()));
        record.count(read, StatusCode::Good);
        record.count(read, StatusCode::Good);
        record.count(read, StatusCode::BadTooManyOperations);
        let close = RequestMessage::CloseSession(Box::<CloseSessionRequest>::default());
        record.count(slot_of(&close), StatusCode::BadUserAccessDenied);
        let query = RequestMessage::QueryNext(Box::<QueryNextRequest>::default());
        let query_slot = slot_of(&query);
        assert_eq!(query_slot, SERVICES.len() + 3);
        record.count(query_slot, StatusCode::BadServiceUnsupported);
        let pair = |c: ServiceCounterDataType| (c.total_count, c.error_count);
        assert_eq!(pair(counter(&record.counts, "Read")), (3, 1));
        assert_eq!(pair(counter(&record.counts, "QueryNext")), (1, 1));
        assert_eq!(pair(counter(&record.counts, "Write")), (0, 0));
        assert_eq!(pair(total(&record.counts)), (5, 3));
        assert_eq!(record.unauthorized, 1);
    }

    /// Each user the session was activated for is kept once, in order.
    #[test]
    fn the_user_history_lists_each_activation_once() {
        let mut record = ClientRecord::default();
        let otto = UserIdentity::User {
            name: "otto".into(),
            role: uagate_store::Role::Operator,
        };
        record.activated(vec!["de".into()], &UserIdentity::Anonymous);
        record.activated(vec!["de".into()], &otto);
        record.activated(vec!["en".into()], &otto);
        assert_eq!(record.user_history, [UAString::null(), "otto".into()]);
        assert_eq!(record.locale_ids, [UAString::from("en")]);
    }
}
