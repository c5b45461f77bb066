"""Fast DAPO's curriculum metric keys, the agent trainer's tool-use shares and the training time, named once: the
trainers write them, the console line, the plots and the campaign report read them.

Fast DAPO's trainer (recipe/fast_dapo/fast_dapo_ray_trainer.py) logs its curriculum controller's counters
(verl_ext/curriculum/controller.py, `DataController.counters`) under CURRICULUM_PREFIX, and two figures of the batch
each step trains on. The console line (console.py), the plots' token axis (plot.py) and the campaign report's cost
tables (verl_ext/campaign/) read them. The keys live here, beside the readers, and not in verl_ext/curriculum/,
whose package imports verl: reading a metric log needs neither.
"""

CURRICULUM_PREFIX = "curriculum/"  # every curriculum metric, the controller's counters included

# DataController counters (the trainer logs each one as CURRICULUM_PREFIX + its name)
TOKENS_KEY = CURRICULUM_PREFIX + "tokens_generated"  # cumulative generated tokens (response tokens, pad rows excluded)
KEEP_RATE_KEY = CURRICULUM_PREFIX + "keep_rate"  # screened prompts whose group was mixed / prompts screened
RESPONSES_PER_GROUP_KEY = CURRICULUM_PREFIX + "responses_per_training_group"  # responses generated / groups trained

# The batch a step trains on
TRAIN_BATCH_GROUPS_KEY = CURRICULUM_PREFIX + "train_batch_groups"  # groups in the step's training batch
MIXED_FRAC_KEY = CURRICULUM_PREFIX + "train_groups_mixed_frac"  # the fraction of them whose rewards were not all equal

# The agent trainer's shares of a step's episodes (verl_ext/agent/tool_use.py)
TOOL_CALL_FRAC_KEY = "agent/tool_call_frac"  # episodes with at least one well-formed tool call
TOOL_RESULT_IN_ANSWER_KEY = "agent/tool_result_in_answer_frac"  # episodes whose final answer writes a tool's result

# The training loop's cumulative wall time in seconds (verl_ext/trainer/clock.py: carried across resumes), the
# plots' time axis, the campaign report's cost in time and the console's budget column
TIME_KEY = "time/train_total_s"
