"""Campaign sweeps: conditions x seeds of one recipe, each run in its own directory, resumable, plotted together."""

from verl_ext.campaign.spec import CampaignSpec, RunPlan, is_done, mark_done

__all__ = ["CampaignSpec", "RunPlan", "is_done", "mark_done"]
