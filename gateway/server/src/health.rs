//! Server state and ServiceLevel: what the Server object publishes about
//! this appliance's health, per Part 4 §6.6.2.4.2 and the HighAvailability
//! reference (0 Maintenance, 1 NoData, 2..199 Degraded, 200..255 Healthy).

use opcua_types::{DateTime, LocalizedText, ServerState};

/// ServiceLevel in maintenance: clients should disconnect and come back later.
pub const MAINTENANCE: u8 = 0;
/// ServiceLevel without process data.
pub const NO_DATA: u8 = 1;
/// Highest ServiceLevel (fully healthy).
pub const HEALTHY_MAX: u8 = 255;

/// A state requested through RequestServerStateChange.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedState {
    /// The requested ServerState.
    pub state: ServerState,
    /// When the server expects to be back (Server.EstimatedReturnTime).
    pub estimated_return_time: DateTime,
    /// ServerStatus.SecondsTillShutdown.
    pub seconds_till_shutdown: u32,
    /// ServerStatus.ShutdownReason.
    pub reason: LocalizedText,
    /// Refuse new sessions (CreateSession gets BadServerHalted) while this
    /// state is in force; existing sessions keep running. Set from the
    /// console's maintenance page; the OPC UA method never sets it.
    pub drain: bool,
}

/// The Server object's externally controlled state: the state requested by
/// an administrator and the operator's ServiceLevel override.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// The last requested non-Running state, if any.
    pub requested: Option<RequestedState>,
    /// A fixed ServiceLevel set by the operator instead of the computed one.
    pub override_level: Option<u8>,
    /// Why the operator set it (shown in the console; empty when not given).
    pub override_reason: String,
    /// Bumped by every override change, so an expiry timer only clears
    /// the override it was started for.
    pub override_generation: u64,
}

/// The subrange a requested state maps to: Suspended, Shutdown and Test are
/// Maintenance; Failed, NoConfiguration, CommunicationFault and Unknown are
/// NoData; Running returns to the computed value.
pub fn level_for_state(state: ServerState) -> Option<u8> {
    match state {
        ServerState::Running => None,
        ServerState::Suspended | ServerState::Shutdown | ServerState::Test => Some(MAINTENANCE),
        ServerState::Failed
        | ServerState::NoConfiguration
        | ServerState::CommunicationFault
        | ServerState::Unknown => Some(NO_DATA),
    }
}

impl Control {
    /// Whether new sessions are refused: a requested state with `drain`.
    pub fn draining(&self) -> bool {
        self.requested.as_ref().is_some_and(|r| r.drain)
    }

    /// The ServerStatus.State to publish.
    pub fn state(&self) -> ServerState {
        self.requested
            .as_ref()
            .map(|r| r.state)
            .unwrap_or(ServerState::Running)
    }

    /// The ServiceLevel to publish given the provider's computed value.
    pub fn service_level(&self, computed: u8) -> u8 {
        match self
            .requested
            .as_ref()
            .and_then(|r| level_for_state(r.state))
        {
            Some(level) => level,
            None => self.override_level.unwrap_or(computed),
        }
    }

    /// Where the published ServiceLevel comes from: `requested_state`
    /// (RequestServerStateChange or console maintenance), `override` (the
    /// operator's fixed value) or `computed`.
    pub fn level_source(&self) -> &'static str {
        if self
            .requested
            .as_ref()
            .and_then(|r| level_for_state(r.state))
            .is_some()
        {
            "requested_state"
        } else if self.override_level.is_some() {
            "override"
        } else {
            "computed"
        }
    }

    /// Whether the server is in the Maintenance subrange (for the drain option).
    pub fn in_maintenance(&self, computed: u8) -> bool {
        self.service_level(computed) == MAINTENANCE
    }

    /// Applies a RequestServerStateChange; Running clears the request.
    pub fn request(&mut self, requested: RequestedState) {
        if requested.state == ServerState::Running {
            self.requested = None;
        } else {
            self.requested = Some(requested);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(state: ServerState) -> RequestedState {
        RequestedState {
            state,
            estimated_return_time: DateTime::null(),
            seconds_till_shutdown: 0,
            reason: LocalizedText::null(),
            drain: false,
        }
    }

    #[test]
    fn states_map_to_the_part4_subranges() {
        let mut c = Control::default();
        assert_eq!(c.service_level(230), 230);
        for (s, level) in [
            (ServerState::Suspended, 0),
            (ServerState::Shutdown, 0),
            (ServerState::Test, 0),
            (ServerState::Failed, 1),
            (ServerState::NoConfiguration, 1),
            (ServerState::CommunicationFault, 1),
            (ServerState::Unknown, 1),
        ] {
            c.request(req(s));
            assert_eq!(c.service_level(230), level, "{s:?}");
            assert_eq!(c.state(), s);
        }
        c.request(req(ServerState::Running));
        assert_eq!(c.service_level(230), 230);
        assert_eq!(c.state(), ServerState::Running);
    }

    #[test]
    fn override_applies_only_while_running() {
        let mut c = Control {
            override_level: Some(150),
            ..Default::default()
        };
        assert_eq!(c.service_level(255), 150);
        assert_eq!(c.level_source(), "override");
        c.request(req(ServerState::Suspended));
        assert_eq!(c.service_level(255), 0);
        assert_eq!(c.level_source(), "requested_state");
        assert!(c.in_maintenance(255));
        c.request(req(ServerState::Running));
        assert_eq!(c.service_level(255), 150);
        assert!(!c.in_maintenance(255));
    }
}
