//! Static configuration of the local space: build information and the
//! server limits advertised under `Server/ServerCapabilities`.

use opcua_types::DateTime;

/// Build information published as `Server/ServerStatus/BuildInfo`.
///
/// Passed once to [`crate::LocalSpace::new`] by the binary at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildInfo {
    /// URI of the product (`BuildInfo.ProductUri`).
    pub product_uri: String,
    /// Manufacturer name (`BuildInfo.ManufacturerName`).
    pub manufacturer_name: String,
    /// Product name (`BuildInfo.ProductName`).
    pub product_name: String,
    /// Software version (`BuildInfo.SoftwareVersion`).
    pub software_version: String,
    /// Build number (`BuildInfo.BuildNumber`).
    pub build_number: String,
    /// Build date (`BuildInfo.BuildDate`).
    pub build_date: DateTime,
}

impl BuildInfo {
    /// Converts into the OPC UA structure.
    pub(crate) fn to_ua(&self) -> opcua_types::BuildInfo {
        opcua_types::BuildInfo {
            product_uri: self.product_uri.as_str().into(),
            manufacturer_name: self.manufacturer_name.as_str().into(),
            product_name: self.product_name.as_str().into(),
            software_version: self.software_version.as_str().into(),
            build_number: self.build_number.as_str().into(),
            build_date: self.build_date,
        }
    }
}

/// Limits of the server as published in `Server/ServerCapabilities` (and its
/// `OperationLimits` child).
///
/// The per-request operation counts (`max_nodes_per_*`) are enforced by the
/// session dispatcher (`BadTooManyOperations`), not by this crate; this crate
/// enforces `max_references_per_node` and `max_browse_continuation_points`
/// during Browse. A value of `0` means "no limit" as in OPC UA Part 5.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceLimits {
    /// `OperationLimits/MaxNodesPerRead`.
    pub max_nodes_per_read: u32,
    /// `OperationLimits/MaxNodesPerBrowse` (also applies to BrowseNext).
    pub max_nodes_per_browse: u32,
    /// `OperationLimits/MaxNodesPerTranslateBrowsePathsToNodeIds`.
    pub max_nodes_per_translate: u32,
    /// `OperationLimits/MaxNodesPerRegisterNodes`.
    pub max_nodes_per_register: u32,
    /// `OperationLimits/MaxNodesPerWrite`.
    pub max_nodes_per_write: u32,
    /// `OperationLimits/MaxNodesPerMethodCall`.
    pub max_nodes_per_method_call: u32,
    /// `OperationLimits/MaxMonitoredItemsPerCall`.
    pub max_monitored_items_per_call: u32,
    /// Most references returned per node in one Browse/BrowseNext result before
    /// a continuation point is issued (0 = only the client's limit applies).
    pub max_references_per_node: u32,
    /// `ServerCapabilities/MaxBrowseContinuationPoints`, per session.
    pub max_browse_continuation_points: u16,
    /// `ServerCapabilities/MaxStringLength`.
    pub max_string_length: u32,
    /// `ServerCapabilities/MaxArrayLength`.
    pub max_array_length: u32,
    /// `ServerCapabilities/MaxByteStringLength`.
    pub max_byte_string_length: u32,
    /// `ServerCapabilities/MaxSessions`.
    pub max_sessions: u32,
    /// `ServerCapabilities/MinSupportedSampleRate` in milliseconds.
    pub min_supported_sample_rate: f64,
    /// `ServerCapabilities/MaxSubscriptionsPerSession`.
    pub max_subscriptions_per_session: u32,
    /// `ServerCapabilities/MaxMonitoredItemsPerSubscription`.
    pub max_monitored_items_per_subscription: u32,
    /// `ServerCapabilities/MaxMonitoredItemsQueueSize`.
    pub max_monitored_items_queue_size: u32,
}

impl Default for SpaceLimits {
    fn default() -> Self {
        Self {
            max_nodes_per_read: 1000,
            max_nodes_per_browse: 1000,
            max_nodes_per_translate: 1000,
            max_nodes_per_register: 1000,
            max_nodes_per_write: 1000,
            max_nodes_per_method_call: 1000,
            max_monitored_items_per_call: 1000,
            max_references_per_node: 1000,
            max_browse_continuation_points: 10,
            max_string_length: 65_535,
            max_array_length: 65_535,
            max_byte_string_length: 4 * 1024 * 1024,
            max_sessions: 100,
            min_supported_sample_rate: 100.0,
            max_subscriptions_per_session: 10,
            max_monitored_items_per_subscription: 1000,
            max_monitored_items_queue_size: 100,
        }
    }
}
