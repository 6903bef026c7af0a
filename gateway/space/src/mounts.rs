//! Nodes for mounted field connections.
//!
//! Every configured field connection `<name>` gets, at start-up or when it
//! is added while running ([`LocalSpace::add_mount`]; removed with
//! [`LocalSpace::remove_mount`]):
//!
//! * the mount folder `Objects/<name>` (FolderType, node id
//!   `ns=GATEWAY_NS;s=Field.<name>`), under which the engine proxies the
//!   field server's own address space;
//! * the status object `Objects/Gateway/FieldConnections/<name>`
//!   (BaseObjectType, node id `ns=GATEWAY_NS;s=FieldStatus.<name>`) with the
//!   read-only variables listed in [`FIELD_STATUS_VARS`], which the engine
//!   updates with [`LocalSpace::set_field_status`].
//!
//! The `Gateway/FieldConnections` folder ([`GATEWAY_FIELD_CONNECTIONS`]) is
//! created with the first mount.

use opcua_nodes::{AccessLevel, EventNotifier, NodeBase, NodeType, Object, Variable};
use opcua_types::{
    BrowseDirection, DataTypeId, DataValue, DateTime, LocalizedText, NodeId, ObjectId,
    ObjectTypeId, QualifiedName, ReferenceTypeId, StatusCode, VariableTypeId, Variant,
};

use crate::space::{gw, insert_node, GATEWAY_FOLDER, GATEWAY_NS};
use crate::write::stored_value;
use crate::{LocalSpace, SpaceError};

/// String identifier (in [`GATEWAY_NS`]) of the `Gateway/FieldConnections`
/// folder holding one status object per mounted field connection.
pub const GATEWAY_FIELD_CONNECTIONS: &str = "Gateway.FieldConnections";

/// Prefix of the string identifier of a mount folder (`Field.<name>`).
const MOUNT_PREFIX: &str = "Field.";
/// Prefix of the string identifier of a status object (`FieldStatus.<name>`)
/// and its variables (`FieldStatus.<name>.<Var>`).
const STATUS_PREFIX: &str = "FieldStatus.";

/// Browse names of the status variables of a field connection, in the order
/// they are created, with their DataTypes: `State` (String),
/// `ActiveEndpoint` (String), `ServiceLevel` (Byte), `ReconnectCount`
/// (UInt32), `FailoverCount` (UInt32), `LastError` (StatusCode), `Enabled`
/// (Boolean), `Failing` (Boolean), `FailedAttempts` (UInt32).
pub const FIELD_STATUS_VARS: [&str; 9] = [
    "State",
    "ActiveEndpoint",
    "ServiceLevel",
    "ReconnectCount",
    "FailoverCount",
    "LastError",
    "Enabled",
    "Failing",
    "FailedAttempts",
];

const FIELD_STATUS_TYPES: [DataTypeId; 9] = [
    DataTypeId::String,
    DataTypeId::String,
    DataTypeId::Byte,
    DataTypeId::UInt32,
    DataTypeId::UInt32,
    DataTypeId::StatusCode,
    DataTypeId::Boolean,
    DataTypeId::Boolean,
    DataTypeId::UInt32,
];

/// The status of one field connection as published under
/// `Gateway/FieldConnections/<name>`; passed by the engine to
/// [`LocalSpace::set_field_status`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldStatusValues {
    /// `State`: the connection state as text (e.g. `"Connected"`).
    pub state: String,
    /// `ActiveEndpoint`: URL of the endpoint currently in use (empty if none).
    pub active_endpoint: String,
    /// `ServiceLevel`: the field server's ServiceLevel as last read.
    pub service_level: u8,
    /// `ReconnectCount`: reconnects since start-up.
    pub reconnect_count: u32,
    /// `FailoverCount`: failovers to another endpoint since start-up.
    pub failover_count: u32,
    /// `LastError`: the last error seen on the connection (Good if none).
    pub last_error: StatusCode,
    /// `Enabled`: whether the connection is enabled in the configuration.
    pub enabled: bool,
    /// `Failing`: no server serves the connection and it is failing rather
    /// than still connecting (several attempts in a row failed, or it gave
    /// up): what a SCADA alarms on, while `State` still says `Connecting`.
    pub failing: bool,
    /// `FailedAttempts`: connect attempts that failed since a server last
    /// served the connection; 0 while it is served.
    pub failed_attempts: u32,
}

impl FieldStatusValues {
    /// The values in the order of [`FIELD_STATUS_VARS`].
    fn variants(&self) -> [Variant; 9] {
        [
            Variant::String(self.state.as_str().into()),
            Variant::String(self.active_endpoint.as_str().into()),
            Variant::Byte(self.service_level),
            Variant::UInt32(self.reconnect_count),
            Variant::UInt32(self.failover_count),
            Variant::StatusCode(self.last_error),
            Variant::Boolean(self.enabled),
            Variant::Boolean(self.failing),
            Variant::UInt32(self.failed_attempts),
        ]
    }
}

fn good(value: Variant, t: DateTime) -> DataValue {
    DataValue {
        value: Some(value),
        status: Some(StatusCode::Good),
        source_timestamp: Some(t),
        source_picoseconds: None,
        server_timestamp: Some(t),
        server_picoseconds: None,
    }
}

fn folder(id: &NodeId, name: &str, description: &str) -> Object {
    let mut f = Object::new(
        id,
        QualifiedName::new(GATEWAY_NS, name),
        LocalizedText::new("", name),
        EventNotifier::empty(),
    );
    f.set_description(LocalizedText::new("", description));
    f
}

fn status_variable(
    id: &NodeId,
    name: &str,
    data_type: DataTypeId,
    value: Variant,
    now: DateTime,
) -> Variable {
    let mut v = Variable::new_data_value(
        id,
        QualifiedName::new(GATEWAY_NS, name),
        LocalizedText::new("", name),
        data_type,
        None,
        None,
        value.clone(),
    );
    v.set_access_level(AccessLevel::CURRENT_READ);
    v.set_user_access_level(AccessLevel::CURRENT_READ);
    v.set_minimum_sampling_interval(0.0);
    v.set_data_value(good(value, now));
    v
}

impl LocalSpace {
    /// Node id (namespace [`GATEWAY_NS`], string id `Field.<name>`) of the
    /// folder `Objects/<name>` under which the field connection `<name>` is
    /// mounted.
    pub fn mount_folder_id(name: &str) -> NodeId {
        gw(&format!("{MOUNT_PREFIX}{name}"))
    }

    /// Node id (string id `FieldStatus.<name>`) of the status object
    /// `Objects/Gateway/FieldConnections/<name>`.
    pub fn field_status_object_id(name: &str) -> NodeId {
        gw(&format!("{STATUS_PREFIX}{name}"))
    }

    /// Node id of a status variable (string id `FieldStatus.<name>.<var>`),
    /// e.g. `field_status_id("line1", "State")`; `var` is one of
    /// [`FIELD_STATUS_VARS`].
    pub fn field_status_id(name: &str, var: &str) -> NodeId {
        gw(&format!("{STATUS_PREFIX}{name}.{var}"))
    }

    /// Creates the mount folder `Objects/<name>` (FolderType, BrowseName
    /// `GATEWAY_NS:<name>`, organized by the Objects folder i=85) and the
    /// status object `Objects/Gateway/FieldConnections/<name>` with the
    /// read-only variables of [`FIELD_STATUS_VARS`], initialised to
    /// [`FieldStatusValues::default`] with timestamps `now`. The
    /// `FieldConnections` folder is created on first use.
    ///
    /// Called once per configured field connection at start-up. Nothing is
    /// changed when an error is returned:
    /// [`SpaceError::InvalidMountName`] for an empty name,
    /// [`SpaceError::MountExists`] when `<name>` is already mounted,
    /// [`SpaceError::BrowseNameInUse`] when the Objects folder already has a
    /// child with that browse name (e.g. `Gateway`), and
    /// [`SpaceError::NodeIdInUse`] when one of the node ids is already taken
    /// (possible with names containing `.`, e.g. `a` and `a.State`).
    pub fn add_mount(&mut self, name: &str, now: DateTime) -> Result<(), SpaceError> {
        if name.is_empty() {
            return Err(SpaceError::InvalidMountName(name.to_string()));
        }
        if self.mounts.iter().any(|m| m == name) {
            return Err(SpaceError::MountExists(name.to_string()));
        }
        let objects: NodeId = ObjectId::ObjectsFolder.into();
        let browse_name = QualifiedName::new(GATEWAY_NS, name);
        let taken = self
            .space
            .find_references(
                &objects,
                Some((ReferenceTypeId::HierarchicalReferences, true)),
                &self.types,
                BrowseDirection::Forward,
            )
            .filter_map(|r| self.space.find(r.target_node))
            .any(|n| n.as_node().browse_name() == &browse_name);
        if taken {
            return Err(SpaceError::BrowseNameInUse(name.to_string()));
        }
        let folder_id = Self::mount_folder_id(name);
        let status_id = Self::field_status_object_id(name);
        let var_ids = FIELD_STATUS_VARS.map(|v| Self::field_status_id(name, v));
        if let Some(used) = [&folder_id, &status_id]
            .into_iter()
            .chain(var_ids.iter())
            .find(|id| self.space.node_exists(id))
        {
            return Err(SpaceError::NodeIdInUse(used.clone()));
        }

        let organizes = ReferenceTypeId::Organizes;
        let has_td = ReferenceTypeId::HasTypeDefinition;
        let folder_type: NodeId = ObjectTypeId::FolderType.into();

        // The mount folder is an event notifier under the Server object: its
        // events are the field server's (those of the field Server object).
        let mut mount = folder(
            &folder_id,
            name,
            &format!("Address space of the field connection {name}"),
        );
        mount.set_event_notifier(EventNotifier::SUBSCRIBE_TO_EVENTS);
        insert_node(&mut self.space, mount);
        self.space.insert_reference(&objects, &folder_id, organizes);
        self.space.insert_reference(
            &NodeId::from(ObjectId::Server),
            &folder_id,
            ReferenceTypeId::HasNotifier,
        );
        self.space
            .insert_reference(&folder_id, &folder_type, has_td);

        let connections = gw(GATEWAY_FIELD_CONNECTIONS);
        if !self.space.node_exists(&connections) {
            insert_node(
                &mut self.space,
                folder(
                    &connections,
                    "FieldConnections",
                    "Status of the gateway's field connections",
                ),
            );
            self.space
                .insert_reference(&gw(GATEWAY_FOLDER), &connections, organizes);
            self.space
                .insert_reference(&connections, &folder_type, has_td);
        }

        let mut status = Object::new(
            &status_id,
            browse_name,
            LocalizedText::new("", name),
            EventNotifier::empty(),
        );
        status.set_description(LocalizedText::new(
            "",
            &format!("Status of the field connection {name}"),
        ));
        insert_node(&mut self.space, status);
        self.space
            .insert_reference(&connections, &status_id, organizes);
        let base_object: NodeId = ObjectTypeId::BaseObjectType.into();
        self.space
            .insert_reference(&status_id, &base_object, has_td);

        let base_var: NodeId = VariableTypeId::BaseDataVariableType.into();
        let initial = FieldStatusValues::default().variants();
        for (((id, var), data_type), value) in var_ids
            .iter()
            .zip(FIELD_STATUS_VARS)
            .zip(FIELD_STATUS_TYPES)
            .zip(initial)
        {
            insert_node(
                &mut self.space,
                status_variable(id, var, data_type, value, now),
            );
            self.space
                .insert_reference(&status_id, id, ReferenceTypeId::HasComponent);
            self.space.insert_reference(id, &base_var, has_td);
        }
        self.mounts.push(name.to_string());
        Ok(())
    }

    /// Removes the nodes [`LocalSpace::add_mount`] made for `name` (mount
    /// folder, status object and its variables) with every reference to
    /// them. Called when a field connection is removed while running; a
    /// northbound item on one of these nodes then reads `BadNodeIdUnknown`.
    /// The `Gateway/FieldConnections` folder stays. [`SpaceError::UnknownMount`]
    /// (nothing changed) when `name` is not mounted.
    pub fn remove_mount(&mut self, name: &str) -> Result<(), SpaceError> {
        let Some(pos) = self.mounts.iter().position(|m| m == name) else {
            return Err(SpaceError::UnknownMount(name.to_string()));
        };
        for var in FIELD_STATUS_VARS {
            self.space.delete(&Self::field_status_id(name, var), true);
        }
        self.space.delete(&Self::field_status_object_id(name), true);
        self.space.delete(&Self::mount_folder_id(name), true);
        self.mounts.remove(pos);
        Ok(())
    }

    /// Sets the status variables of the field connection `name`.
    ///
    /// Called by the engine whenever the connection's status changes. The
    /// values are stored directly (these are plain read-only variables, not
    /// subject to [`LocalSpace::set_value`]'s checks); only variables whose
    /// value differs get the new value with Good status and timestamps
    /// `now`, so unchanged ones keep their source timestamp.
    /// [`SpaceError::UnknownMount`] when `name` was not added with
    /// [`LocalSpace::add_mount`].
    pub fn set_field_status(
        &mut self,
        name: &str,
        status: &FieldStatusValues,
        now: DateTime,
    ) -> Result<(), SpaceError> {
        if !self.mounts.iter().any(|m| m == name) {
            return Err(SpaceError::UnknownMount(name.to_string()));
        }
        for (var, value) in FIELD_STATUS_VARS.iter().zip(status.variants()) {
            let id = Self::field_status_id(name, var);
            let Some(NodeType::Variable(node)) = self.space.find_mut(&id) else {
                return Err(SpaceError::UnknownNode(id));
            };
            if stored_value(node) != value {
                node.set_data_value(good(value, now));
            }
        }
        Ok(())
    }

    /// Names of the mounted field connections, in creation order.
    pub fn mounts(&self) -> &[String] {
        &self.mounts
    }

    /// The mount name when `node` is a mount folder (see
    /// [`LocalSpace::mount_folder_id`]); used by the dispatcher to decide
    /// whether a Browse of `node` must be merged with the field server's.
    pub fn mount_of_folder(&self, node: &NodeId) -> Option<&str> {
        if node.namespace != GATEWAY_NS {
            return None;
        }
        let opcua_types::Identifier::String(s) = &node.identifier else {
            return None;
        };
        let name = s.as_ref().strip_prefix(MOUNT_PREFIX)?;
        self.mounts
            .iter()
            .find(|m| m.as_str() == name)
            .map(String::as_str)
    }
}
