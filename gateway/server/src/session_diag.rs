//! The per-session diagnostics of Part 5 (12.10 SessionDiagnosticsDataType,
//! 12.11 SessionSecurityDiagnosticsDataType) shown in
//! Server/ServerDiagnostics/SessionsDiagnosticsSummary: what a client said
//! when it created and activated its session, and its requests counted by
//! service. Pure data: the session table keeps one [`ClientRecord`] per
//! session and builds the arrays from it once a second.

use std::time::Instant;

use opcua_core::RequestMessage;
use opcua_types::{
    ApplicationDescription, DateTime, MessageSecurityMode, ServiceCounterDataType,
    SessionDiagnosticsDataType, SessionSecurityDiagnosticsDataType, StatusCode, UAString,
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

/// What one session's diagnostics report beyond the session's other
/// fields. Filled at CreateSession ([`ClientRecord::new`]) and
/// ActivateSession ([`ClientRecord::activated`]); counted for every
/// answered request of the session ([`ClientRecord::count`]).
#[derive(Debug)]
pub struct ClientRecord {
    /// The client's ApplicationDescription from CreateSession.
    pub description: ApplicationDescription,
    /// The serverUri the client asked for in CreateSession.
    pub server_uri: UAString,
    /// The endpointUrl the client used in CreateSession.
    pub endpoint_url: UAString,
    /// The largest response the client takes (0: no limit).
    pub max_response_message_size: u32,
    /// When the session was created.
    pub connected: DateTime,
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
        Self {
            description: ApplicationDescription::default(),
            server_uri: UAString::null(),
            endpoint_url: UAString::null(),
            max_response_message_size: 0,
            connected: DateTime::null(),
            locale_ids: Vec::new(),
            user_history: Vec::new(),
            counts: [(0, 0); SLOTS],
            unauthorized: 0,
        }
    }
}

impl ClientRecord {
    /// The record of a session created now by a client describing itself
    /// as `description`.
    pub fn new(
        description: ApplicationDescription,
        server_uri: UAString,
        endpoint_url: UAString,
        max_response_message_size: u32,
    ) -> Self {
        Self {
            description,
            server_uri,
            endpoint_url,
            max_response_message_size,
            connected: DateTime::now(),
            ..Self::default()
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

    /// The counter of the service named `name` (one of [`SERVICES`] or
    /// [`UNLISTED`]).
    fn counter(&self, name: &str) -> ServiceCounterDataType {
        let (total_count, error_count) = SERVICES
            .iter()
            .chain(UNLISTED.iter())
            .position(|s| *s == name)
            .map_or((0, 0), |i| self.counts[i]);
        ServiceCounterDataType {
            total_count,
            error_count,
        }
    }

    /// All requests of the session, whatever the service.
    fn total(&self) -> ServiceCounterDataType {
        let (total_count, error_count) =
            self.counts.iter().fold((0u32, 0u32), |(t, e), (ct, ce)| {
                (t.saturating_add(*ct), e.saturating_add(*ce))
            });
        ServiceCounterDataType {
            total_count,
            error_count,
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

/// The SessionDiagnosticsDataType of `session` at `now` (`instant` is the
/// same moment on the monotonic clock, for the last contact time).
pub fn session_diagnostics(
    session: &Session,
    now: DateTime,
    instant: Instant,
) -> SessionDiagnosticsDataType {
    let c = &session.client;
    let last_contact = instant.saturating_duration_since(session.last_activity);
    let last_contact = chrono::Duration::from_std(last_contact)
        .map(|d| DateTime::from(now.as_chrono() - d))
        .unwrap_or(now);
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let subs = &session.subscriptions;
    SessionDiagnosticsDataType {
        session_id: session.id.clone(),
        session_name: session.name.as_str().into(),
        client_description: c.description.clone(),
        server_uri: c.server_uri.clone(),
        endpoint_url: c.endpoint_url.clone(),
        locale_ids: Some(c.locale_ids.clone()),
        actual_session_timeout: session.timeout.as_secs_f64() * 1000.0,
        max_response_message_size: c.max_response_message_size,
        client_connection_time: c.connected,
        client_last_contact_time: last_contact,
        current_subscriptions_count: n(subs.subscription_ids().len()),
        current_monitored_items_count: n(subs.monitored_item_count()),
        current_publish_requests_in_queue: n(subs.pending_publish_count()),
        total_request_count: c.total(),
        unauthorized_request_count: c.unauthorized,
        read_count: c.counter("Read"),
        history_read_count: c.counter("HistoryRead"),
        write_count: c.counter("Write"),
        history_update_count: c.counter("HistoryUpdate"),
        call_count: c.counter("Call"),
        create_monitored_items_count: c.counter("CreateMonitoredItems"),
        modify_monitored_items_count: c.counter("ModifyMonitoredItems"),
        set_monitoring_mode_count: c.counter("SetMonitoringMode"),
        set_triggering_count: c.counter("SetTriggering"),
        delete_monitored_items_count: c.counter("DeleteMonitoredItems"),
        create_subscription_count: c.counter("CreateSubscription"),
        modify_subscription_count: c.counter("ModifySubscription"),
        set_publishing_mode_count: c.counter("SetPublishingMode"),
        publish_count: c.counter("Publish"),
        republish_count: c.counter("Republish"),
        transfer_subscriptions_count: c.counter("TransferSubscriptions"),
        delete_subscriptions_count: c.counter("DeleteSubscriptions"),
        // The gateway takes no node management or query services; they are
        // answered BadServiceUnsupported, and counted.
        add_nodes_count: c.counter("AddNodes"),
        add_references_count: c.counter("AddReferences"),
        delete_nodes_count: c.counter("DeleteNodes"),
        delete_references_count: c.counter("DeleteReferences"),
        browse_count: c.counter("Browse"),
        browse_next_count: c.counter("BrowseNext"),
        translate_browse_paths_to_node_ids_count: c.counter("TranslateBrowsePathsToNodeIds"),
        query_first_count: c.counter("QueryFirst"),
        query_next_count: c.counter("QueryNext"),
        register_nodes_count: c.counter("RegisterNodes"),
        unregister_nodes_count: c.counter("UnregisterNodes"),
    }
}

/// The SessionSecurityDiagnosticsDataType of `session`.
pub fn session_security_diagnostics(session: &Session) -> SessionSecurityDiagnosticsDataType {
    let identity = session.identity();
    let o = &session.origin;
    SessionSecurityDiagnosticsDataType {
        session_id: session.id.clone(),
        client_user_id_of_session: identity.map(user_id).unwrap_or_default(),
        client_user_id_history: Some(session.client.user_history.clone()),
        // The lexical names of UserTokenType (Part 5 12.11).
        authentication_mechanism: match identity {
            Some(UserIdentity::User { .. }) => "UserName",
            Some(UserIdentity::Certificate { .. }) => "Certificate",
            Some(UserIdentity::Anonymous) => "Anonymous",
            None => "",
        }
        .into(),
        encoding: "UA Binary".into(),
        transport_protocol: transport_profile(o.transport).into(),
        security_mode: match o.security_mode {
            "Sign" => MessageSecurityMode::Sign,
            "SignAndEncrypt" => MessageSecurityMode::SignAndEncrypt,
            _ => MessageSecurityMode::None,
        },
        security_policy_uri: o.security_policy.as_str().into(),
        client_certificate: session.client_certificate.clone(),
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
        let counter = |c: ServiceCounterDataType| (c.total_count, c.error_count);
        assert_eq!(counter(record.counter("Read")), (3, 1));
        assert_eq!(counter(record.counter("QueryNext")), (1, 1));
        assert_eq!(counter(record.counter("Write")), (0, 0));
        assert_eq!(counter(record.total()), (5, 3));
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
