"""Machine-checked evidence for the Reserve–Occupy core (spec/VERIFICATION.md).

* ``spec_model``  -- the transition relation written once for Python values and Z3 terms;
* ``z3_model``    -- Z3 proofs that the invariants are inductive over that relation;
* ``refine``      -- the bridge from the real controller to the encoding (keeps Z3 honest);
* ``modelcheck``  -- exhaustive BFS over the *real* ``StalenessController``;
* ``mutants``     -- deliberately broken cores that every check must catch;
* ``deep``        -- the long model-checking run behind ``make proofs-deep``.
"""
