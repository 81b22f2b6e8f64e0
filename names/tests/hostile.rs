//! A snapshot's names section may be anything: whatever JSON it holds, parsing it, resolving
//! its types and computing their shapes never panics and never loops (cycles of aliases,
//! self-referring abbreviations, nested types that grow without end).

use heapsnap_names::{Program, Ty, TypeEnv};
use proptest::prelude::*;

const BASE: &str = r#"{"units":[{"unit":"M","fields":[{"name":"x","path":"x","kind":"value","type":{"c":"M.t","a":[{"c":"int","a":[]}]}}],
"types":[{"path":"M.t","params":[1],"manifest":null,"kind":{"variant":[{"name":"A","args":[],"res":null},{"name":"B","args":[{"v":1},{"c":"M.t","a":[{"t":[{"v":1},{"v":1}]}]}],"res":null}],"unboxed":false}},
{"path":"M.u","params":[],"manifest":{"c":"M.u","a":[]},"kind":"abstract"},
{"path":"M.F.s","params":[2],"manifest":{"c":"M.F{X}.s","a":[{"v":2}]},"kind":"abstract"},
{"path":"M.r","params":[],"manifest":null,"kind":{"record":[["a",true,{"c":"M.G(M.H).s","a":[{"c":"int","a":[]}]}]],"repr":"regular"}}],
"modules":[{"path":"M.G","alias":"M.F"},{"path":"M.F","functor":"X"},{"path":"M.H","alias":"M.H"},{"path":"M.F","include":"M.F(M.F)"}]}]}"#;

fn exercise(json: &str) {
    let Ok(p) = Program::parse(json) else { return };
    let env = TypeEnv::new(&p);
    let mut tys: Vec<Ty> = p.units.iter().flat_map(|u| u.fields.iter().filter_map(|f| f.ty.clone())).collect();
    for u in &p.units {
        for d in &u.types {
            tys.push(Ty::Constr(d.path.clone(), d.params.iter().map(|_| Ty::Constr("int".into(), vec![])).collect()));
        }
    }
    for t in &tys {
        let _ = env.shape(t);
        if let Some(c) = env.canon(t) {
            let _ = env.shape(&c);
            let _ = heapsnap_names::types::display(&c);
        }
    }
}

#[test]
fn the_base_document_resolves() {
    let p = Program::parse(BASE).unwrap();
    let env = TypeEnv::new(&p);
    // A nested type grows at every level: its canonical form is refused past a size.
    let t = Ty::Constr("M.t".into(), vec![Ty::Constr("int".into(), vec![])]);
    assert!(matches!(env.shape(&t), heapsnap_names::Shape::Variant { .. }));
    // A self-referring abbreviation and an alias to itself end as unknown.
    assert_eq!(env.shape(&Ty::Constr("M.u".into(), vec![])), heapsnap_names::Shape::Unknown);
    assert_eq!(env.shape(&Ty::Constr("M.H.t".into(), vec![])), heapsnap_names::Shape::Unknown);
    exercise(BASE);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn mutated_documents_never_panic(cuts in proptest::collection::vec((0usize..2000, 0usize..40, "[\\[\\]{}\",:a-zA-Z0-9.(){}]{0,6}"), 1..6)) {
        let mut doc = BASE.to_string();
        for (at, len, with) in cuts {
            let at = at.min(doc.len());
            let end = (at + len).min(doc.len());
            if doc.is_char_boundary(at) && doc.is_char_boundary(end) {
                doc.replace_range(at..end, &with);
            }
        }
        exercise(&doc);
    }
}
