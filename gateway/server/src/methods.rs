//! The methods the local space answers for Call (see `routed.rs`), among
//! them those the engine itself implements on the Server object
//! (RequestServerStateChange, GetMonitoredItems), and the caller of a
//! Write or Call.

use opcua_types::{
    CallMethodRequest, CallMethodResult, DateTime, LocalizedText, MessageSecurityMode, NodeId,
    ServerState, StatusCode, Variant,
};
use uagate_space::{arguments_status, LocalSpace};
use uagate_store::Role;

use crate::health::RequestedState;
use crate::session::UserIdentity;
use crate::sessions::SessionTable;
use crate::subscriptions::GatewayEvent;
use crate::Engine;

/// Server.GetMonitoredItems on the Server object and on ServerType.
const GET_MONITORED_ITEMS: [u32; 2] = [11492, 11489];
/// Server.RequestServerStateChange on the Server object and on ServerType.
const REQUEST_SERVER_STATE_CHANGE: [u32; 2] = [12886, 12883];
/// Server.ResendData and ServerType.ResendData.
const RESEND_DATA: [u32; 2] = [12873, 12871];
/// The Server object.
const SERVER_OBJECT: u32 = 2253;

/// ConditionType.ConditionRefresh and ConditionType.ConditionRefresh2.
const CONDITION_REFRESH: [u32; 2] = [3875, 12912];

/// Whether `id` is Server.RequestServerStateChange (its UserExecutable
/// follows [`Caller::is_secure_admin`]).
pub(crate) fn is_request_server_state_change(id: &NodeId) -> bool {
    is_ns0(id, &REQUEST_SERVER_STATE_CHANGE)
}

/// Whether reading `attribute` of `node` shows other clients' sessions:
/// the Value of SessionsDiagnosticsSummary's SessionDiagnosticsArray or
/// SessionSecurityDiagnosticsArray (Part 5 6.3.4: security information,
/// for authorised users only), or of ServerDiagnostics'
/// SubscriptionDiagnosticsArray (every session's subscriptions). Only a
/// caller for whom [`is_secure_admin`] holds may read or monitor them.
pub(crate) fn shows_other_sessions(node: &NodeId, attribute: u32) -> bool {
    const SESSION_DIAGNOSTICS_ARRAYS: [u32; 3] = [3707, 3708, 2290];
    attribute == opcua_types::AttributeId::Value as u32 && is_ns0(node, &SESSION_DIAGNOSTICS_ARRAYS)
}

/// Whether `identity` on a channel of security `mode` is an administrator
/// on a signed and encrypted channel: who may change the server state and
/// see other clients' sessions.
pub(crate) fn is_secure_admin(identity: &UserIdentity, mode: MessageSecurityMode) -> bool {
    matches!(
        identity,
        UserIdentity::User {
            role: Role::Admin,
            ..
        }
    ) && mode == MessageSecurityMode::SignAndEncrypt
}

/// True for the methods whose Call is maintenance or recovery work
/// (RequestServerStateChange, ConditionRefresh, ConditionRefresh2): such a
/// Call from an activated session may use the control reserve (see
/// [`crate::sessions::SessionTable::work_class`]).
pub(crate) fn is_control_method(id: &NodeId) -> bool {
    is_ns0(id, &REQUEST_SERVER_STATE_CHANGE) || is_ns0(id, &CONDITION_REFRESH)
}

fn is_ns0(id: &NodeId, candidates: &[u32]) -> bool {
    id.namespace == 0 && candidates.iter().any(|c| *id == NodeId::new(0, *c))
}

/// What the caller of a service may do, from its identity and channel.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The session's user.
    pub identity: UserIdentity,
    /// The channel's security mode.
    pub mode: MessageSecurityMode,
    /// The session's subscriptions (for GetMonitoredItems).
    pub session: NodeId,
}

impl Caller {
    /// Whether this caller may write values: operators and administrators,
    /// and anonymous users only when the configuration allows it.
    pub fn can_write(&self, allow_anonymous: bool) -> bool {
        match &self.identity {
            UserIdentity::User { role, .. } => matches!(role, Role::Admin | Role::Operator),
            UserIdentity::Certificate { .. } => true,
            UserIdentity::Anonymous => allow_anonymous,
        }
    }

    /// How much of a node's UserAccessLevel (`level`) this caller has
    /// (Part 3 5.6.2): without the right to write, the write bits
    /// (CurrentWrite, HistoryWrite, StatusWrite, TimestampWrite) are off.
    pub fn user_access_level(&self, level: u8, allow_anonymous_write: bool) -> u8 {
        const WRITE_BITS: u8 = 0x02 | 0x08 | 0x20 | 0x40;
        if self.can_write(allow_anonymous_write) {
            level
        } else {
            level & !WRITE_BITS
        }
    }

    /// Whether this caller may change the server state: an administrator on
    /// a signed and encrypted channel.
    pub fn is_secure_admin(&self) -> bool {
        is_secure_admin(&self.identity, self.mode)
    }

    /// Name recorded in audit entries.
    pub fn actor(&self) -> String {
        match &self.identity {
            UserIdentity::User { name, .. } => name.clone(),
            UserIdentity::Certificate { thumbprint } => format!("x509:{thumbprint}"),
            UserIdentity::Anonymous => "anonymous".into(),
        }
    }
}

/// A method's result: outputs only when good.
pub(crate) fn call_result(
    status: StatusCode,
    inputs: Option<Vec<StatusCode>>,
    outputs: Vec<Variant>,
) -> CallMethodResult {
    CallMethodResult {
        status_code: status,
        input_argument_results: inputs,
        input_argument_diagnostic_infos: None,
        output_arguments: if status.is_good() {
            Some(outputs)
        } else {
            None
        },
    }
}

impl Engine {
    /// One method call on the local space (the gateway's own methods).
    pub(crate) async fn call_one(
        &self,
        caller: &Caller,
        call: &CallMethodRequest,
    ) -> CallMethodResult {
        if crate::alarms::is_condition_refresh(&call.method_id) {
            return self.condition_refresh(caller, call);
        }
        let inputs = call.input_arguments.as_deref().unwrap_or(&[]);
        let signature = match self
            .space
            .local()
            .method_signature(&call.object_id, &call.method_id)
        {
            Ok(s) => s,
            Err(status) => return call_result(status, None, Vec::new()),
        };
        let arg_results = match LocalSpace::validate_arguments(&signature, inputs) {
            Ok(r) => r,
            Err(status) => return call_result(status, None, Vec::new()),
        };
        let status = arguments_status(&arg_results);
        if status.is_bad() {
            return call_result(status, Some(arg_results), Vec::new());
        }
        let on_server = call.object_id == NodeId::new(0, SERVER_OBJECT);
        if on_server && is_ns0(&call.method_id, &REQUEST_SERVER_STATE_CHANGE) {
            return match self.request_server_state_change(caller, inputs).await {
                Ok(_) => call_result(StatusCode::Good, None, Vec::new()),
                Err(status) => call_result(status, None, Vec::new()),
            };
        }
        if on_server && is_ns0(&call.method_id, &RESEND_DATA) {
            return call_result(
                resend_data(&self.sessions, caller, inputs),
                None,
                Vec::new(),
            );
        }
        if on_server && is_ns0(&call.method_id, &GET_MONITORED_ITEMS) {
            return match get_monitored_items(&self.sessions, caller, inputs) {
                Ok(out) => call_result(StatusCode::Good, None, out),
                Err(status) => call_result(status, None, Vec::new()),
            };
        }
        let now = DateTime::now();
        match self
            .space
            .local_mut()
            .call_local(now, &call.object_id, &call.method_id, inputs)
        {
            Some(Ok(out)) => call_result(StatusCode::Good, None, out),
            Some(Err(status)) => call_result(status, None, Vec::new()),
            None => call_result(StatusCode::BadNotImplemented, None, Vec::new()),
        }
    }

    /// Server.RequestServerStateChange (Part 5 §9.4): administrators on a
    /// SignAndEncrypt channel only; updates State, SecondsTillShutdown,
    /// ShutdownReason, EstimatedReturnTime and ServiceLevel, persists the
    /// request (so a restart keeps it) and audits it in the change log.
    async fn request_server_state_change(
        &self,
        caller: &Caller,
        inputs: &[Variant],
    ) -> Result<Option<String>, StatusCode> {
        if !caller.is_secure_admin() {
            tracing::warn!(user = %caller.actor(), "RequestServerStateChange refused: not an administrator on a SignAndEncrypt channel");
            return Err(StatusCode::BadUserAccessDenied);
        }
        let state = match inputs.first() {
            Some(Variant::Int32(v)) => server_state(*v).ok_or(StatusCode::BadInvalidArgument)?,
            _ => return Err(StatusCode::BadInvalidArgument),
        };
        let estimated_return_time = match inputs.get(1) {
            Some(Variant::DateTime(d)) if state != ServerState::Running => **d,
            _ => DateTime::null(),
        };
        let seconds_till_shutdown = match inputs.get(2) {
            Some(Variant::UInt32(s)) if state == ServerState::Shutdown => *s,
            _ => 0,
        };
        let reason = match inputs.get(3) {
            Some(Variant::LocalizedText(t)) => (**t).clone(),
            _ => LocalizedText::null(),
        };
        let requested = RequestedState {
            state,
            estimated_return_time,
            seconds_till_shutdown,
            reason,
            drain: false,
        };
        self.change_server_state(&caller.actor(), requested).await
    }

    /// Puts the server into `requested` (Running clears a request): persists
    /// it (so a restart keeps it), audits it in the change log under
    /// `actor`, updates State, SecondsTillShutdown, ShutdownReason,
    /// EstimatedReturnTime and ServiceLevel, and emits the state-change
    /// event. The one code path of the OPC UA method and the console's
    /// maintenance operation; callers check authorization first.
    ///
    /// A maintenance state (ServiceLevel 0) first lets the appliance pair
    /// hand the configuration leadership to the other appliance and waits
    /// for it (bounded, [`crate::level::Handover`]), so the leadership has
    /// moved before clients see ServiceLevel 0 and move; any other state
    /// tells the pair afterwards that the appliance stands for election
    /// again. Answers the hand-over's sentence for the operator, if there
    /// was one.
    pub async fn change_server_state(
        &self,
        actor: &str,
        requested: RequestedState,
    ) -> Result<Option<String>, StatusCode> {
        let state = requested.state;
        let entering = crate::health::level_for_state(state) == Some(crate::health::MAINTENANCE);
        let hook = self.control.handover();
        let handover = match &hook {
            Some(hand_over) if entering => hand_over(true).await,
            _ => None,
        };
        if let Some(note) = &handover {
            tracing::info!(user = %actor, "{note}");
        }
        self.store
            .set_setting(
                actor,
                crate::control::STATE_SETTING,
                &crate::control::encode_state(&requested),
            )
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "could not persist the requested server state");
                StatusCode::BadInternalError
            })?;
        self.control.request(requested);
        self.refresh_server_state();
        if let (false, Some(hand_over)) = (entering, &hook) {
            hand_over(false).await;
        }
        tracing::info!(user = %actor, ?state, "server state changed");
        for event in GatewayEvent::state_change(state, actor) {
            self.sessions.emit_event(&event);
        }
        Ok(handover)
    }
}

/// Server.GetMonitoredItems: the server and client handles of one of the
/// caller's subscriptions.
fn get_monitored_items(
    sessions: &SessionTable,
    caller: &Caller,
    inputs: &[Variant],
) -> Result<Vec<Variant>, StatusCode> {
    let id = match inputs.first() {
        Some(Variant::UInt32(id)) => *id,
        _ => return Err(StatusCode::BadInvalidArgument),
    };
    let (server, client) = sessions.monitored_item_handles(&caller.session, id)?;
    Ok(vec![Variant::from(server), Variant::from(client)])
}

/// Server.ResendData (Part 5 9.2) for the caller's subscription.
fn resend_data(sessions: &SessionTable, caller: &Caller, inputs: &[Variant]) -> StatusCode {
    match inputs.first() {
        Some(Variant::UInt32(id)) => match sessions.resend_data(&caller.session, *id) {
            Ok(()) => StatusCode::Good,
            Err(status) => status,
        },
        _ => StatusCode::BadInvalidArgument,
    }
}

/// The ServerState enumeration from its wire value.
pub fn server_state(v: i32) -> Option<ServerState> {
    Some(match v {
        0 => ServerState::Running,
        1 => ServerState::Failed,
        2 => ServerState::NoConfiguration,
        3 => ServerState::Suspended,
        4 => ServerState::Shutdown,
        5 => ServerState::Test,
        6 => ServerState::CommunicationFault,
        7 => ServerState::Unknown,
        _ => return None,
    })
}
