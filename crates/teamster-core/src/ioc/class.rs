//! The system traffic classes and how they map to vSphere's.
//!
//! | Teamster name | vSphere system traffic | default shares |
//! |---|---|---|
//! | `management` | Management traffic | normal (50) |
//! | `vm` | Virtual machine traffic | high (100) |
//! | `nfs` | NFS traffic | normal |
//! | `iscsi` | iSCSI traffic | normal |
//! | `storage` | vSAN traffic | normal |
//! | `live-migration` | vMotion traffic | normal |
//! | `replication` | vSphere Replication traffic | normal |
//! | `fault-tolerance` | Fault Tolerance traffic | normal |
//! | `backup` | vSphere Data Protection backup traffic | normal |
//!
//! Every class defaults to no reservation and no limit. Network resource pools and VM ports
//! sit under `vm`.

use super::Shares;
use core::fmt;

/// A system traffic class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrafficClass {
    Management,
    VirtualMachine,
    Nfs,
    Iscsi,
    Storage,
    LiveMigration,
    Replication,
    FaultTolerance,
    Backup,
}

impl TrafficClass {
    /// All classes, in vSphere's order.
    pub const ALL: [TrafficClass; 9] = [
        TrafficClass::Management,
        TrafficClass::FaultTolerance,
        TrafficClass::LiveMigration,
        TrafficClass::VirtualMachine,
        TrafficClass::Iscsi,
        TrafficClass::Nfs,
        TrafficClass::Replication,
        TrafficClass::Storage,
        TrafficClass::Backup,
    ];

    /// The name used in Teamster's configuration.
    pub fn name(self) -> &'static str {
        match self {
            TrafficClass::Management => "management",
            TrafficClass::VirtualMachine => "vm",
            TrafficClass::Nfs => "nfs",
            TrafficClass::Iscsi => "iscsi",
            TrafficClass::Storage => "storage",
            TrafficClass::LiveMigration => "live-migration",
            TrafficClass::Replication => "replication",
            TrafficClass::FaultTolerance => "fault-tolerance",
            TrafficClass::Backup => "backup",
        }
    }

    /// The vSphere system traffic type it stands for.
    pub fn vsphere_name(self) -> &'static str {
        match self {
            TrafficClass::Management => "Management Traffic",
            TrafficClass::VirtualMachine => "Virtual Machine Traffic",
            TrafficClass::Nfs => "NFS Traffic",
            TrafficClass::Iscsi => "iSCSI Traffic",
            TrafficClass::Storage => "vSAN Traffic",
            TrafficClass::LiveMigration => "vMotion Traffic",
            TrafficClass::Replication => "vSphere Replication (VR) Traffic",
            TrafficClass::FaultTolerance => "Fault Tolerance (FT) Traffic",
            TrafficClass::Backup => "vSphere Data Protection Backup Traffic",
        }
    }

    /// Default shares: VM traffic high, every other class normal.
    pub fn default_shares(self) -> Shares {
        if self == TrafficClass::VirtualMachine {
            Shares::HIGH
        } else {
            Shares::NORMAL
        }
    }
}

impl fmt::Display for TrafficClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for TrafficClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TrafficClass::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<&str> = TrafficClass::ALL.iter().map(|c| c.name()).collect();
            format!("unknown traffic class `{s}`: expected one of {}", names.join(", "))
        })
    }
}
