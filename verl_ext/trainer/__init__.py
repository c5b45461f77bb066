"""The project's trainer base on verl's legacy RayPPOTrainer (see ppo_trainer.py)."""
