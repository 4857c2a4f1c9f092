"""From raw photos to 112x112 faces on insightface's 5-point template: MTCNN detection and the similarity warp."""
