//! What every runtime family shares: the program as first found ([`program`]), the one trait
//! a family implements ([`family`]), the captured world ([`copied_world`], [`regions`]) and how
//! it is copied ([`copy`], [`custom_ops`]), the verdict on a stop ([`world_check`]), and the
//! machinery for native code (frame tables, code classification, unwinding, root lists,
//! Dynlink plugins).

pub mod bytecode;
pub mod bytecode_file;
pub mod bytecode_roots;
pub mod code;
pub mod copied_world;
pub mod copy;
pub mod custom_ops;
pub mod family;
pub mod frames;
pub mod marshal;
pub mod plugins;
pub mod program;
pub mod regions;
pub mod root_chains;
pub mod toplevel;
pub mod unwind;
pub mod world_check;
