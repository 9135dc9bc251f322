"""Finding steps and transformer layers in one rank's kernel sequence (rules in segmentation_rules.yaml)."""
