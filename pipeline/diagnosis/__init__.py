"""diagnostics: findings with their statistic, threshold and evidence, from the tables of earlier stages."""
