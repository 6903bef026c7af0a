//! Construction of the local address space and the server state the engine
//! updates at run time.

use opcua_nodes::{DefaultTypeTree, EventNotifier, NodeBase, NodeType, Object, TypeTree, Variable};
use opcua_server::address_space::{AddressSpace, CoreNamespace};
use opcua_types::{
    DataTypeId, DataValue, DateTime, ExtensionObject, LocalizedText, NodeClass, NodeId, ObjectId,
    ObjectTypeId, QualifiedName, ReferenceTypeId, ServerDiagnosticsSummaryDataType, ServerState,
    StatusCode, VariableTypeId, Variant,
};

use crate::demo::add_demo_nodes;
use crate::redundancy::RedundancyState;
use crate::{BuildInfo, SpaceError, SpaceLimits};

/// URI of the gateway's own namespace (always namespace index [`GATEWAY_NS`]).
pub const GATEWAY_NAMESPACE_URI: &str = "urn:uagate:gateway";
/// Namespace index of [`GATEWAY_NAMESPACE_URI`]; index 1 is the application URI.
pub const GATEWAY_NS: u16 = 2;
/// String identifier (in [`GATEWAY_NS`]) of the `Objects/Gateway` folder.
pub const GATEWAY_FOLDER: &str = "Gateway";
/// String identifier of `Gateway/Uptime` (Double, seconds since start).
pub const GATEWAY_UPTIME: &str = "Gateway.Uptime";
/// String identifier of `Gateway/Hostname` (String, set by the engine).
pub const GATEWAY_HOSTNAME: &str = "Gateway.Hostname";
/// String identifier of `Gateway/CurrentSessionCount` (UInt32).
pub const GATEWAY_SESSION_COUNT: &str = "Gateway.CurrentSessionCount";

const NS0_URI: &str = "http://opcfoundation.org/UA/";
const DEFAULT_PROFILE: &str = "http://opcfoundation.org/UA-Profile/Server/StandardUA2017";

/// Mutable server state published under `Server/ServerStatus` and friends.
#[derive(Debug, Clone)]
pub(crate) struct ServerRuntime {
    pub(crate) start_time: DateTime,
    pub(crate) state: ServerState,
    pub(crate) build: BuildInfo,
    pub(crate) seconds_till_shutdown: u32,
    pub(crate) shutdown_reason: LocalizedText,
    pub(crate) service_level: u8,
    pub(crate) server_array: Vec<String>,
    pub(crate) redundancy: RedundancyState,
    pub(crate) estimated_return_time: DateTime,
    pub(crate) diagnostics: ServerDiagnosticsSummaryDataType,
    /// SessionsDiagnosticsSummary's SessionDiagnosticsArray, encoded.
    pub(crate) session_diagnostics: Variant,
    /// SessionsDiagnosticsSummary's SessionSecurityDiagnosticsArray, encoded.
    pub(crate) session_security_diagnostics: Variant,
    /// ServerDiagnostics' SubscriptionDiagnosticsArray, encoded.
    pub(crate) subscription_diagnostics: Variant,
    pub(crate) hostname: String,
    pub(crate) profiles: Vec<String>,
    pub(crate) locales: Vec<String>,
}

/// The gateway's local address space: namespace 0 plus the gateway namespace.
///
/// Built once at start-up with [`LocalSpace::new`]; the engine then updates the
/// server state through the setters and serves Read/Browse/BrowseNext/
/// TranslateBrowsePathsToNodeIds/RegisterNodes from the session dispatcher.
/// All service functions take `&self`, so the space can sit behind an
/// `RwLock` shared by all sessions.
pub struct LocalSpace {
    pub(crate) space: AddressSpace,
    pub(crate) types: DefaultTypeTree,
    pub(crate) namespaces: Vec<String>,
    pub(crate) limits: SpaceLimits,
    pub(crate) rt: ServerRuntime,
    /// Names of the mounted field connections, in creation order
    /// (see [`LocalSpace::add_mount`]).
    pub(crate) mounts: Vec<String>,
}

impl std::fmt::Debug for LocalSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSpace")
            .field("namespaces", &self.namespaces)
            .field("limits", &self.limits)
            .field("state", &self.rt.state)
            .field("mounts", &self.mounts)
            .finish_non_exhaustive()
    }
}

impl LocalSpace {
    /// Builds namespace 0 (the standard node set) and the gateway namespace
    /// (`urn:uagate:gateway`, index 2; index 1 is `application_uri`) with the
    /// folder `Objects/Gateway` holding the gateway's own variables, and
    /// with `demo` the `Gateway/Demo` object (`[server] demo_nodes`).
    ///
    /// Called once by the binary at start-up; `start_time` becomes
    /// `ServerStatus/StartTime` and the origin of `Gateway/Uptime`.
    pub fn new(
        application_uri: &str,
        build: BuildInfo,
        limits: &SpaceLimits,
        start_time: DateTime,
        demo: bool,
    ) -> Self {
        let mut types = DefaultTypeTree::new();
        let mut space = AddressSpace::new();
        space.import_node_set(&CoreNamespace, types.namespaces_mut());
        let app_idx = types.namespaces_mut().add_namespace(application_uri);
        let gw_idx = types.namespaces_mut().add_namespace(GATEWAY_NAMESPACE_URI);
        tracing::debug!(app_idx, gw_idx, "local space namespaces registered");
        space.add_namespace(application_uri, 1);
        space.add_namespace(GATEWAY_NAMESPACE_URI, GATEWAY_NS);

        add_gateway_nodes(&mut space, start_time);
        if demo {
            add_demo_nodes(&mut space, start_time);
        }
        space.load_into_type_tree(&mut types);

        let rt = ServerRuntime {
            start_time,
            state: ServerState::Running,
            build,
            seconds_till_shutdown: 0,
            shutdown_reason: LocalizedText::null(),
            service_level: 255,
            server_array: vec![application_uri.to_string()],
            redundancy: RedundancyState::default(),
            estimated_return_time: DateTime::null(),
            diagnostics: ServerDiagnosticsSummaryDataType::default(),
            session_diagnostics: Variant::from(Vec::<ExtensionObject>::new()),
            session_security_diagnostics: Variant::from(Vec::<ExtensionObject>::new()),
            subscription_diagnostics: Variant::from(Vec::<ExtensionObject>::new()),
            hostname: String::new(),
            profiles: vec![DEFAULT_PROFILE.to_string()],
            locales: vec!["en".to_string()],
        };
        let mut me = Self {
            space,
            types,
            namespaces: vec![
                NS0_URI.to_string(),
                application_uri.to_string(),
                GATEWAY_NAMESPACE_URI.to_string(),
            ],
            limits: limits.clone(),
            rt,
            mounts: Vec::new(),
        };
        me.link_redundancy_nodes();
        me.remove_unsupported_features();
        me
    }

    /// Takes out of the standard node set the optional features the gateway
    /// does not provide, so that a client browsing for them finds nothing
    /// rather than methods answering BadNotImplemented and variables
    /// without values: ServerConfiguration (push certificate
    /// management, Part 12, a component of Server: configuration and trust lists are managed from
    /// the console, CLI and REST) and Server.SetSubscriptionDurable (durable
    /// subscriptions, kept across a restart, are not provided). Called once
    /// by [`LocalSpace::new`].
    fn remove_unsupported_features(&mut self) {
        for root in [
            NodeId::from(ObjectId::ServerConfiguration),
            NodeId::from(opcua_types::MethodId::Server_SetSubscriptionDurable),
        ] {
            self.remove_subtree(&root);
        }
    }

    /// Deletes `root` and every node below it by forward hierarchical
    /// references, with every reference to them. Only for instance subtrees
    /// of their own (no shared type nodes below).
    fn remove_subtree(&mut self, root: &NodeId) {
        let hierarchical = NodeId::from(ReferenceTypeId::HierarchicalReferences);
        let mut todo = vec![root.clone()];
        let mut doomed = Vec::new();
        while let Some(node) = todo.pop() {
            if doomed.contains(&node) || self.find(&node).is_none() {
                continue;
            }
            for (_, target, forward) in self.matching_references(
                &node,
                opcua_types::BrowseDirection::Forward,
                Some((&hierarchical, true)),
            ) {
                if forward {
                    todo.push(target);
                }
            }
            doomed.push(node);
        }
        for node in doomed {
            self.space.delete(&node, true);
        }
    }

    /// The limits this space was built with; the dispatcher uses them for
    /// `BadTooManyOperations` checks.
    pub fn limits(&self) -> &SpaceLimits {
        &self.limits
    }

    /// The current `NamespaceArray` (index = namespace index).
    pub fn namespace_array(&self) -> &[String] {
        &self.namespaces
    }

    /// Appends a namespace URI to the `NamespaceArray` (e.g. for a mounted
    /// field server) and returns its index; returns the existing index when
    /// the URI is already present. Reads of `Server/NamespaceArray` (i=2255)
    /// reflect the addition immediately.
    pub fn add_namespace(&mut self, uri: &str) -> Result<u16, SpaceError> {
        if uri.is_empty() {
            return Err(SpaceError::EmptyNamespaceUri);
        }
        if let Some(i) = self.namespaces.iter().position(|n| n == uri) {
            return u16::try_from(i).map_err(|_| SpaceError::NamespaceTableFull(uri.into()));
        }
        let idx = u16::try_from(self.namespaces.len())
            .map_err(|_| SpaceError::NamespaceTableFull(uri.into()))?;
        self.namespaces.push(uri.to_string());
        self.space.add_namespace(uri, idx);
        // Keep the type tree's namespace map in step (it assigns the next
        // free index, which is `idx` as both tables grow together).
        self.types.namespaces_mut().add_namespace(uri);
        Ok(idx)
    }

    /// Sets `ServerStatus/State`; called by the engine on start, shutdown,
    /// failover.
    pub fn set_state(&mut self, state: ServerState) {
        self.rt.state = state;
    }

    /// Current `ServerStatus/State`.
    pub fn state(&self) -> ServerState {
        self.rt.state
    }

    /// Sets `Server/ServiceLevel` (0..=255; redundancy uses it to rank servers).
    pub fn set_service_level(&mut self, level: u8) {
        self.rt.service_level = level;
    }

    /// Sets `ServerStatus/SecondsTillShutdown` and `ShutdownReason` when the
    /// engine announces a shutdown.
    pub fn set_shutdown(&mut self, seconds_till_shutdown: u32, reason: LocalizedText) {
        self.rt.seconds_till_shutdown = seconds_till_shutdown;
        self.rt.shutdown_reason = reason;
    }

    /// Sets `Server/ServerArray`. Index 0 is always this server's application
    /// URI (Part 5); other URIs (e.g. the redundant partner) follow in order.
    pub fn set_server_array(&mut self, others: &[String]) {
        let own = self.namespaces.get(1).cloned().unwrap_or_default();
        let mut arr = vec![own.clone()];
        arr.extend(others.iter().filter(|u| **u != own).cloned());
        self.rt.server_array = arr;
    }

    /// Sets `Server/EstimatedReturnTime` (Part 5 6.3.1: when the server is
    /// expected to be back in `Running` after a shutdown or failure;
    /// `DateTime::null()` = unknown, the default).
    pub fn set_estimated_return_time(&mut self, t: DateTime) {
        self.rt.estimated_return_time = t;
    }

    /// Sets `ServerCapabilities/ServerProfileArray`.
    pub fn set_server_profiles(&mut self, profiles: Vec<String>) {
        self.rt.profiles = profiles;
    }

    /// Sets `ServerDiagnosticsSummary/CurrentSessionCount` and
    /// `Gateway/CurrentSessionCount`.
    pub fn set_current_session_count(&mut self, n: u32) {
        self.rt.diagnostics.current_session_count = n;
    }

    /// Replaces the whole `ServerDiagnosticsSummary` structure.
    pub fn set_diagnostics_summary(&mut self, summary: ServerDiagnosticsSummaryDataType) {
        self.rt.diagnostics = summary;
    }

    /// Replaces SessionsDiagnosticsSummary's SessionDiagnosticsArray and
    /// SessionSecurityDiagnosticsArray (one entry per session each) and
    /// ServerDiagnostics' SubscriptionDiagnosticsArray. Who
    /// may read them is the server's decision: the space answers every
    /// Read of them alike.
    pub fn set_session_diagnostics(
        &mut self,
        sessions: Vec<opcua_types::SessionDiagnosticsDataType>,
        security: Vec<opcua_types::SessionSecurityDiagnosticsDataType>,
        subscriptions: Vec<opcua_types::SubscriptionDiagnosticsDataType>,
    ) {
        let encode = |v: Vec<ExtensionObject>| Variant::from(v);
        self.rt.session_diagnostics = encode(
            sessions
                .into_iter()
                .map(ExtensionObject::from_message)
                .collect(),
        );
        self.rt.session_security_diagnostics = encode(
            security
                .into_iter()
                .map(ExtensionObject::from_message)
                .collect(),
        );
        self.rt.subscription_diagnostics = encode(
            subscriptions
                .into_iter()
                .map(ExtensionObject::from_message)
                .collect(),
        );
    }

    /// Sets `Gateway/Hostname` (the engine reads the host name; this crate
    /// does no I/O).
    pub fn set_hostname(&mut self, hostname: &str) {
        self.rt.hostname = hostname.to_string();
    }

    /// `true` when `node_id` exists in the local space.
    pub fn contains(&self, node_id: &NodeId) -> bool {
        self.space.node_exists(node_id)
    }

    /// RegisterNodes: returns the same ids (Part 4 5.8.5 allows returning the
    /// ids unchanged; existence is not required to be checked).
    pub fn register(&self, nodes: &[NodeId]) -> Vec<NodeId> {
        nodes.to_vec()
    }

    /// UnregisterNodes: nothing to release for this space.
    pub fn unregister(&self, _nodes: &[NodeId]) {}

    pub(crate) fn find(&self, id: &NodeId) -> Option<&NodeType> {
        self.space.find(id)
    }

    /// `true` when `id` names a ReferenceType known to the type tree.
    pub(crate) fn is_reference_type(&self, id: &NodeId) -> bool {
        self.types.get(id) == Some(NodeClass::ReferenceType)
    }

    pub(crate) fn is_subtype(&self, child: &NodeId, ancestor: &NodeId) -> bool {
        self.types.is_subtype_of(child, ancestor)
    }

    /// First forward `HasTypeDefinition` target of `id`.
    pub(crate) fn type_definition(&self, id: &NodeId) -> Option<NodeId> {
        self.space
            .find_references(
                id,
                Some((ReferenceTypeId::HasTypeDefinition, false)),
                &self.types,
                opcua_types::BrowseDirection::Forward,
            )
            .next()
            .map(|r| r.target_node.clone())
    }
}

pub(crate) fn gw(id: &str) -> NodeId {
    NodeId::new(GATEWAY_NS, id)
}

pub(crate) fn insert_node(space: &mut AddressSpace, node: impl Into<NodeType>) -> bool {
    space.insert::<_, NodeId>(node, None)
}

fn gateway_variable(
    id: &str,
    name: &str,
    description: &str,
    data_type: DataTypeId,
    value: Variant,
    start_time: DateTime,
) -> Variable {
    let node_id = gw(id);
    let mut v = Variable::new_data_value(
        &node_id,
        QualifiedName::new(GATEWAY_NS, name),
        LocalizedText::new("", name),
        data_type,
        Some(-1),
        None,
        value.clone(),
    );
    v.set_description(LocalizedText::new("", description));
    v.set_data_value(DataValue {
        value: Some(value),
        status: Some(StatusCode::Good),
        source_timestamp: Some(start_time),
        source_picoseconds: None,
        server_timestamp: Some(start_time),
        server_picoseconds: None,
    });
    v
}

fn add_gateway_nodes(space: &mut AddressSpace, start_time: DateTime) {
    let folder_id = gw(GATEWAY_FOLDER);
    let mut folder = Object::new(
        &folder_id,
        QualifiedName::new(GATEWAY_NS, "Gateway"),
        LocalizedText::new("", "Gateway"),
        EventNotifier::empty(),
    );
    folder.set_description(LocalizedText::new(
        "",
        "State of the uagate edge gateway itself",
    ));
    insert_node(space, folder);
    let objects: NodeId = ObjectId::ObjectsFolder.into();
    space.insert_reference(&objects, &folder_id, ReferenceTypeId::Organizes);
    let folder_type: NodeId = ObjectTypeId::FolderType.into();
    space.insert_reference(&folder_id, &folder_type, ReferenceTypeId::HasTypeDefinition);

    let vars = [
        gateway_variable(
            GATEWAY_UPTIME,
            "Uptime",
            "Seconds since the gateway started",
            DataTypeId::Double,
            Variant::Double(0.0),
            start_time,
        ),
        gateway_variable(
            GATEWAY_HOSTNAME,
            "Hostname",
            "Host name of the appliance",
            DataTypeId::String,
            Variant::String("".into()),
            start_time,
        ),
        gateway_variable(
            GATEWAY_SESSION_COUNT,
            "CurrentSessionCount",
            "Number of northbound sessions currently open",
            DataTypeId::UInt32,
            Variant::UInt32(0),
            start_time,
        ),
    ];
    let var_type: NodeId = VariableTypeId::BaseDataVariableType.into();
    for v in vars {
        let id = v.node_id().clone();
        insert_node(space, v);
        space.insert_reference(&folder_id, &id, ReferenceTypeId::HasComponent);
        space.insert_reference(&id, &var_type, ReferenceTypeId::HasTypeDefinition);
    }
}
