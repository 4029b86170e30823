"""The verl-on-Ray scale-out path: recorded trajectories as verl dataset rows, a replay agent loop, and
the ``verl.trainer.main_ppo`` config (see ``config.py`` for the GPU command). Import the submodules;
``agent_loop`` needs verl's Ray stack."""
