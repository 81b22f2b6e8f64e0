//! Closure info words (runtime/caml/mlvalues.h, `Closinfo_val`), field 1 of every closure.

/// `Start_env_closinfo`: the field index where a closure's environment starts.
pub fn start_env_closinfo(info: u64) -> u64 {
    (info << 8) >> 9
}

/// `Arity_closinfo`.
pub fn arity_closinfo(info: u64) -> i64 {
    (info as i64) >> 56
}

/// `Make_closinfo`.
pub fn make_closinfo(arity: i64, start_env: u64) -> u64 {
    ((arity as u64) << 56).wrapping_add(start_env << 1).wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closinfo_matches_the_runtime_macros() {
        let info = make_closinfo(3, 5);
        assert_eq!(start_env_closinfo(info), 5);
        assert_eq!(arity_closinfo(info), 3);
        assert_eq!(info & 1, 1);
        assert_eq!(arity_closinfo(make_closinfo(-2, 3)), -2);
    }
}
