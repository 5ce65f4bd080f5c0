//! One type per kind of id, so that a Vultr instance id can never be passed
//! where a block id or a client id is expected.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    };
}

string_id!(
    /// A client's stable id (a UUID v7 in text form), independent of its name.
    ClientId
);
string_id!(
    /// (client, resource kind, dispatch generation): identifies one dispatch.
    OperationKey
);
string_id!(
    /// The label sent with a create; unique per dispatch,
    /// `oduflow-<client id>-<kind>-<12 hex>` (see [`Label::new_dispatch`]).
    Label
);
string_id!(
    /// A Vultr instance id (a UUID chosen by Vultr).
    VultrInstanceId
);
string_id!(
    /// A Vultr block storage id.
    VultrBlockId
);
string_id!(
    /// Hex SHA-256 of an API key: the only form in which a key is ever kept.
    KeyFingerprint
);

/// Vultr's ids for instances, blocks and DNS records are hyphenated UUIDs:
/// the one rule an operator's `--id` (CLI) or `"id"` (API) is checked
/// against, before anything is asked of the store or the provider.
pub fn check_resource_id(id: &str) -> Result<(), String> {
    if id.len() == 36 && uuid::Uuid::try_parse(id).is_ok() {
        Ok(())
    } else {
        Err(format!("id {id:?} is not a Vultr resource id (a UUID)"))
    }
}

/// The label prefix of every resource oduflow creates. Inventory passes search
/// for it, so it must never change once resources exist.
pub const LABEL_PREFIX: &str = "oduflow-";

impl ClientId {
    pub fn new_v7() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// A client id as the labels and `oduflow orphan list` show it (a
    /// UUID, written lower-case and hyphenated).
    pub fn parse(s: &str) -> Result<Self, String> {
        match uuid::Uuid::parse_str(s.trim()) {
            Ok(u) => Ok(Self(u.to_string())),
            Err(_) => Err(format!("{s:?} is not a client id: a client id is a UUID, as a label names it")),
        }
    }
}

/// Hex digits of randomness that make a dispatch's label unique among its
/// client's dispatches of one kind: 48 bits, with a few dispatches per client.
const LABEL_TAIL_HEX: usize = 12;

impl Label {
    /// A fresh label for a new dispatch of `kind` for `client`:
    /// `oduflow-<client id>-<kind>-<12 hex>`. The random tail makes it unique
    /// per dispatch; the client and kind it names let a resource that no
    /// receipt accounts for (an orphan, after a restore say) be traced to
    /// its client. A VM's label is also its hostname: 60 characters, within
    /// a DNS label's 63.
    pub fn new_dispatch(client: &ClientId, kind: ResourceKind) -> Self {
        let tail = uuid::Uuid::new_v4().simple().to_string();
        Self(format!("{LABEL_PREFIX}{client}-{}-{}", kind.as_str(), &tail[..LABEL_TAIL_HEX]))
    }

    /// The client and kind a label made by [`Label::new_dispatch`] names.
    /// `None` for any other label, including the `oduflow-<uuid>` labels of
    /// versions before 0.2, which name no client.
    pub fn owner(&self) -> Option<(ClientId, ResourceKind)> {
        let rest = self.0.strip_prefix(LABEL_PREFIX)?;
        let mut parts = rest.rsplitn(3, '-');
        let (tail, kind, client) = (parts.next()?, parts.next()?, parts.next()?);
        let hex = tail.len() == LABEL_TAIL_HEX && tail.bytes().all(|b| b.is_ascii_hexdigit());
        let kind = ResourceKind::parse(kind)?;
        (hex && uuid::Uuid::parse_str(client).is_ok()).then(|| (ClientId(client.to_owned()), kind))
    }
}

impl OperationKey {
    pub fn new(client: &ClientId, kind: ResourceKind, dispatch_generation: i64) -> Self {
        Self(format!("{client}/{}/{dispatch_generation}", kind.as_str()))
    }
}

impl KeyFingerprint {
    /// SHA-256 of the key's bytes, in lowercase hex.
    pub fn of_key(key: &secrecy::SecretString) -> Self {
        use secrecy::ExposeSecret;
        let digest = Sha256::digest(key.expose_secret().as_bytes());
        Self(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The first 12 hex digits, enough for people to tell keys apart.
    pub fn short(&self) -> &str {
        &self.0[..self.0.len().min(12)]
    }
}

/// A queued job's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a dispatch creates or changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Vm,
    Volume,
    Attach,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Vm => "vm",
            ResourceKind::Volume => "volume",
            ResourceKind::Attach => "attach",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "vm" => Some(ResourceKind::Vm),
            "volume" => Some(ResourceKind::Volume),
            "attach" => Some(ResourceKind::Attach),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_sha256_hex_and_hides_the_key() {
        let key = secrecy::SecretString::from("abc".to_owned());
        let fp = KeyFingerprint::of_key(&key);
        assert_eq!(fp.0, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(fp.short(), "ba7816bf8f01");
    }

    #[test]
    fn a_dispatch_label_names_its_client_and_kind() {
        let c = ClientId::new_v7();
        for kind in [ResourceKind::Vm, ResourceKind::Volume, ResourceKind::Attach] {
            let a = Label::new_dispatch(&c, kind);
            assert_ne!(a, Label::new_dispatch(&c, kind), "unique per dispatch");
            assert_eq!(a.owner(), Some((c.clone(), kind)), "{a}");
        }
        let vm = Label::new_dispatch(&c, ResourceKind::Vm);
        assert!(vm.as_str().len() <= 63, "a VM's label is its hostname: {vm}");
        for other in [
            "oduflow-0b1e2c3d-0000-4000-8000-000000000000",
            "oduflow-notaclient-vm-0123456789ab",
            &format!("oduflow-{c}-disk-0123456789ab"),
            &format!("oduflow-{c}-vm-0123"),
            &format!("other-{c}-vm-0123456789ab"),
        ] {
            assert_eq!(Label::from(other).owner(), None, "{other}");
        }
    }

    #[test]
    fn operation_key_names_client_kind_and_generation() {
        let c = ClientId::from("c1");
        assert_eq!(OperationKey::new(&c, ResourceKind::Volume, 3).0, "c1/volume/3");
    }
}
