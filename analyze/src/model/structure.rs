//! The standard library's data structures a block can be recognised as, and the roles of the
//! blocks that have no layout of their own (the recognition itself is `structures`).

/// A recognised structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Structure {
    /// `Hashtbl.t`: `{size; data; seed; initial_size}`.
    Hashtbl,
    /// A node of `Map.Make(_).t`: `Node {l; v; d; r; h}`.
    MapNode,
    /// A node of `Set.Make(_).t`: `Node {l; v; r; h}`.
    SetNode,
    /// `Queue.t`: `{length; first; last}`.
    Queue,
    /// `Stack.t`: `{c; len}`.
    Stack,
    /// `Buffer.t`: `{inner = {buffer; length}; position; initial_buffer}`.
    Buffer,
    /// A cons cell: `x :: tail`, the tail `[]` or another 2-field block (also `Queue` and
    /// `Seq` cells, and pairs ending in a pair or `0`).
    ListCell,
    /// A 1-field block of tag 0: `ref` and `Some` cannot be told apart.
    RefOrSome,
    /// A lazy value not forced yet (tag 246), or being forced (tag 244).
    Lazy,
    /// A forced lazy value the runtime has not short-circuited yet (tag 250).
    ForcedLazy,
}

impl Structure {
    pub fn name(self) -> &'static str {
        match self {
            Structure::Hashtbl => "Hashtbl",
            Structure::MapNode => "Map node",
            Structure::SetNode => "Set node",
            Structure::Queue => "Queue",
            Structure::Stack => "Stack",
            Structure::Buffer => "Buffer",
            Structure::ListCell => "list cell",
            Structure::RefOrSome => "ref or Some",
            Structure::Lazy => "lazy",
            Structure::ForcedLazy => "lazy (forced)",
        }
    }

    /// The structure a kind name stands for (the inverse of [`Structure::name`]).
    pub fn from_name(name: &str) -> Option<Structure> {
        use Structure::*;
        [Hashtbl, MapNode, SetNode, Queue, Stack, Buffer, ListCell, RefOrSome, Lazy, ForcedLazy].into_iter().find(|s| s.name() == name)
    }
}

/// What a block is to the block that holds it, when the holder's structure says so: the parts
/// of a `Hashtbl` have no layout of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Field 1 of a `Hashtbl`: the bucket array.
    HashtblData,
    /// An element of a `Hashtbl`'s bucket array: the first cell of a chain.
    HashtblBuckets,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::HashtblData => "Hashtbl data",
            Role::HashtblBuckets => "Hashtbl bucket chain",
        }
    }

    /// The name of many blocks in this role.
    pub fn plural(self) -> &'static str {
        match self {
            Role::HashtblData => "Hashtbl data",
            Role::HashtblBuckets => "Hashtbl bucket chains",
        }
    }

    /// The role of a block reached from a holder: the holder's structure or role, and the field
    /// that points to it (`None`: some element of a large block, or not known).
    pub fn of_child(holder: Option<Structure>, holder_role: Option<Role>, field: Option<usize>) -> Option<Role> {
        match (holder, holder_role, field) {
            (Some(Structure::Hashtbl), _, Some(1)) => Some(Role::HashtblData),
            (_, Some(Role::HashtblData), _) => Some(Role::HashtblBuckets),
            _ => None,
        }
    }
}
