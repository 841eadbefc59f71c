"""Pure numeric estimators: arrays and frames in, frozen results out; no gate, no I/O, no CLI."""
