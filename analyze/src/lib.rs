//! placeholder until the analyze issue lands
