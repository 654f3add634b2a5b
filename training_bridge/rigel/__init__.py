"""The Rigel method (teacher pass, Phase 1 head distillation, Phase 2 LoRA, scoring) in plain
torch/transformers/peft, with no Django import."""
