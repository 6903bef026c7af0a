//! Values of the `Server` object's variables (and the gateway variables) that
//! are computed at read time from [`crate::space::ServerRuntime`], the limits
//! and the `now` passed in by the caller.

use opcua_types::{
    DateTime, ExtensionObject, NodeId, ServerStatusDataType, TimeZoneDataType, VariableId, Variant,
};

use crate::space::{
    LocalSpace, GATEWAY_HOSTNAME, GATEWAY_NS, GATEWAY_SESSION_COUNT, GATEWAY_UPTIME,
};

impl LocalSpace {
    /// The live value of `id`, or `None` when its stored value applies.
    pub(crate) fn live_value(&self, now: DateTime, id: &NodeId) -> Option<Variant> {
        if id.namespace == GATEWAY_NS {
            return self.live_gateway_value(now, id);
        }
        let var = id.as_variable_id().ok()?;
        let rt = &self.rt;
        let l = &self.limits;
        let build = || rt.build.to_ua();
        use VariableId as V;
        let v: Variant = match var {
            V::Server_NamespaceArray => self.namespaces.clone().into(),
            V::Server_ServerArray => rt.server_array.clone().into(),
            V::Server_ServiceLevel => rt.service_level.into(),
            V::Server_Auditing => false.into(),
            V::Server_LocalTime => ExtensionObject::from_message(TimeZoneDataType {
                offset: 0,
                daylight_saving_in_offset: false,
            })
            .into(),
            V::Server_ServerRedundancy_RedundancySupport => (rt.redundancy.support as i32).into(),
            V::Server_ServerRedundancy_CurrentServerId => {
                rt.redundancy.current_server_id.as_str().into()
            }
            V::Server_ServerRedundancy_ServerUriArray => rt.redundancy.server_uris.clone().into(),
            V::Server_ServerRedundancy_RedundantServerArray => rt
                .redundancy
                .redundant
                .iter()
                .cloned()
                .map(ExtensionObject::from_message)
                .collect::<Vec<_>>()
                .into(),
            V::Server_EstimatedReturnTime => rt.estimated_return_time.into(),
            V::Server_ServerStatus => ExtensionObject::from_message(ServerStatusDataType {
                start_time: rt.start_time,
                current_time: now,
                state: rt.state,
                build_info: build(),
                seconds_till_shutdown: rt.seconds_till_shutdown,
                shutdown_reason: rt.shutdown_reason.clone(),
            })
            .into(),
            V::Server_ServerStatus_StartTime => rt.start_time.into(),
            V::Server_ServerStatus_CurrentTime => now.into(),
            V::Server_ServerStatus_State => (rt.state as i32).into(),
            V::Server_ServerStatus_SecondsTillShutdown => rt.seconds_till_shutdown.into(),
            V::Server_ServerStatus_ShutdownReason => rt.shutdown_reason.clone().into(),
            V::Server_ServerStatus_BuildInfo => ExtensionObject::from_message(build()).into(),
            V::Server_ServerStatus_BuildInfo_ProductName => build().product_name.into(),
            V::Server_ServerStatus_BuildInfo_ProductUri => build().product_uri.into(),
            V::Server_ServerStatus_BuildInfo_ManufacturerName => build().manufacturer_name.into(),
            V::Server_ServerStatus_BuildInfo_SoftwareVersion => build().software_version.into(),
            V::Server_ServerStatus_BuildInfo_BuildNumber => build().build_number.into(),
            V::Server_ServerStatus_BuildInfo_BuildDate => rt.build.build_date.into(),
            V::Server_ServerCapabilities_ServerProfileArray => rt.profiles.clone().into(),
            V::Server_ServerCapabilities_LocaleIdArray => rt.locales.clone().into(),
            V::Server_ServerCapabilities_MinSupportedSampleRate => {
                l.min_supported_sample_rate.into()
            }
            V::Server_ServerCapabilities_MaxBrowseContinuationPoints => {
                l.max_browse_continuation_points.into()
            }
            V::Server_ServerCapabilities_MaxQueryContinuationPoints
            | V::Server_ServerCapabilities_MaxHistoryContinuationPoints => 0u16.into(),
            V::Server_ServerCapabilities_MaxArrayLength => l.max_array_length.into(),
            V::Server_ServerCapabilities_MaxSubscriptionsPerSession => {
                l.max_subscriptions_per_session.into()
            }
            V::Server_ServerCapabilities_MaxMonitoredItemsPerSubscription => {
                l.max_monitored_items_per_subscription.into()
            }
            V::Server_ServerCapabilities_MaxMonitoredItemsQueueSize => {
                l.max_monitored_items_queue_size.into()
            }
            // No limit beyond the per-session ones above (0: none), and none
            // on an event filter's select and where clauses.
            V::Server_ServerCapabilities_MaxSubscriptions
            | V::Server_ServerCapabilities_MaxMonitoredItems
            | V::Server_ServerCapabilities_MaxSelectClauseParameters
            | V::Server_ServerCapabilities_MaxWhereClauseParameters => 0u32.into(),
            // No signed software certificates; no conformance units stated
            // (the profiles are in ServerProfileArray).
            V::Server_ServerCapabilities_SoftwareCertificates => {
                Variant::from(Vec::<ExtensionObject>::new())
            }
            V::Server_ServerCapabilities_ConformanceUnits => {
                Variant::from(Vec::<opcua_types::QualifiedName>::new())
            }
            V::Server_ServerCapabilities_MaxStringLength => l.max_string_length.into(),
            V::Server_ServerCapabilities_MaxByteStringLength => l.max_byte_string_length.into(),
            V::Server_ServerCapabilities_MaxSessions => l.max_sessions.into(),
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead => {
                l.max_nodes_per_read.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite => {
                l.max_nodes_per_write.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerMethodCall => {
                l.max_nodes_per_method_call.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse => {
                l.max_nodes_per_browse.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRegisterNodes => {
                l.max_nodes_per_register.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIds => {
                l.max_nodes_per_translate.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall => {
                l.max_monitored_items_per_call.into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerNodeManagement
            | V::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData
            | V::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadEvents
            | V::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateData
            | V::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateEvents => {
                0u32.into()
            }
            // HistoryRead (raw, modified, processed, at time, events) is
            // passed to the field server that owns a mounted node; the
            // gateway keeps no history itself, changes none (no
            // HistoryUpdate) and sets no limit of its own on what a
            // HistoryRead returns (0: none).
            V::HistoryServerCapabilities_AccessHistoryDataCapability
            | V::HistoryServerCapabilities_AccessHistoryEventsCapability => true.into(),
            V::HistoryServerCapabilities_InsertDataCapability
            | V::HistoryServerCapabilities_ReplaceDataCapability
            | V::HistoryServerCapabilities_UpdateDataCapability
            | V::HistoryServerCapabilities_DeleteRawCapability
            | V::HistoryServerCapabilities_DeleteAtTimeCapability
            | V::HistoryServerCapabilities_InsertAnnotationCapability
            | V::HistoryServerCapabilities_InsertEventCapability
            | V::HistoryServerCapabilities_ReplaceEventCapability
            | V::HistoryServerCapabilities_UpdateEventCapability
            | V::HistoryServerCapabilities_DeleteEventCapability
            | V::HistoryServerCapabilities_ServerTimestampSupported => false.into(),
            V::HistoryServerCapabilities_MaxReturnDataValues
            | V::HistoryServerCapabilities_MaxReturnEventValues => 0u32.into(),
            V::Server_ServerDiagnostics_EnabledFlag => true.into(),
            V::Server_ServerDiagnostics_SessionsDiagnosticsSummary_SessionDiagnosticsArray => {
                rt.session_diagnostics.clone()
            }
            V::Server_ServerDiagnostics_SessionsDiagnosticsSummary_SessionSecurityDiagnosticsArray => {
                rt.session_security_diagnostics.clone()
            }
            V::Server_ServerDiagnostics_SubscriptionDiagnosticsArray => {
                rt.subscription_diagnostics.clone()
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary => {
                ExtensionObject::from_message(rt.diagnostics.clone()).into()
            }
            other => return self.live_diagnostics_field(other),
        };
        Some(v)
    }

    fn live_diagnostics_field(&self, var: VariableId) -> Option<Variant> {
        let d = &self.rt.diagnostics;
        use VariableId as V;
        let n = match var {
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_ServerViewCount => {
                d.server_view_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount => {
                d.current_session_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSessionCount => {
                d.cumulated_session_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_SecurityRejectedSessionCount => {
                d.security_rejected_session_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_RejectedSessionCount => {
                d.rejected_session_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_SessionTimeoutCount => {
                d.session_timeout_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_SessionAbortCount => {
                d.session_abort_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSubscriptionCount => {
                d.current_subscription_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSubscriptionCount => {
                d.cumulated_subscription_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_PublishingIntervalCount => {
                d.publishing_interval_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_SecurityRejectedRequestsCount => {
                d.security_rejected_requests_count
            }
            V::Server_ServerDiagnostics_ServerDiagnosticsSummary_RejectedRequestsCount => {
                d.rejected_requests_count
            }
            _ => return None,
        };
        Some(n.into())
    }

    fn live_gateway_value(&self, now: DateTime, id: &NodeId) -> Option<Variant> {
        let s = match &id.identifier {
            opcua_types::Identifier::String(s) => s.as_ref(),
            _ => return None,
        };
        match s {
            GATEWAY_UPTIME => {
                let ms = (now.as_chrono() - self.rt.start_time.as_chrono()).num_milliseconds();
                Some(Variant::Double((ms.max(0) as f64) / 1000.0))
            }
            GATEWAY_HOSTNAME => Some(Variant::String(self.rt.hostname.as_str().into())),
            GATEWAY_SESSION_COUNT => Some(self.rt.diagnostics.current_session_count.into()),
            _ => None,
        }
    }
}
