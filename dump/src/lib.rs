//! placeholder until the dump issue lands
