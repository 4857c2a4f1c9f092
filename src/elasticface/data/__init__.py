"""Face data: datasets return (uint8 [3, 112, 112] RGB tensor, int label); pair sets feed verification."""
