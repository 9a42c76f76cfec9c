"""Generate the conversational-memory set `bench/data/dialogue_set.json` (fixed seed).

    .venv/bin/python bench/data/make_dialogue_set.py [--seed 17] [--out bench/data/dialogue_set.json]

40 generated conversations between a user and an assistant, 50 turns each (2,000 turns). Each
conversation has one named user and 10 evidence turns, each stating one personal fact (a pet, a
relative's city, an allergy, a job...) in one of several surface forms, among small talk and
assistant replies: 25 turns carry the user's name, so the name alone does not find the answer. 300 questions ask about a named user's fact; each knows its evidence turn.
Question kinds: `direct` (shares the fact's content words with its turn), `paraphrase` (only
the user's name in common: synonyms, or a question about the category: "what is the name of
Maya's dog" for "we adopted a beagle called Biscuit"). Nothing random is asserted about the
output: the same seed always writes the same file.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dialogue_set.json"

FIRST = ("Maya", "Tobias", "Ines", "Kwame", "Lena", "Arjun", "Sofia", "Mikko", "Aylin", "Dario",
         "Hana", "Oskar", "Priya", "Felix", "Noor", "Emil", "Zara", "Jonas", "Leila", "Mateo",
         "Greta", "Ravi", "Yuki", "Bruno", "Amara")
LAST = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Kowalski", "Haddad", "Ferreira", "Novak",
        "Brennan", "Castillo", "Iversen", "Mbeki", "Rossi", "Sato")

# Each fact: values, turn forms ({v} the value), direct questions, paraphrase questions
# ({n} the user's first name). A paraphrase never uses the turn's content words.
FACTS: tuple[dict[str, object], ...] = (
    {"kind": "pet", "values": ("Biscuit", "Pepper", "Mochi", "Juniper", "Ziggy", "Olive"),
     "turns": ("We finally adopted a beagle puppy last weekend, we named him {v}.",
               "Our new beagle {v} chewed through my headphones again."),
     "direct": ("What did {n} name the beagle puppy?",),
     "para": ("What is the name of {n}'s dog?", "Does {n} have any animals at home?")},
    {"kind": "sister_city", "values": ("Lisbon", "Montreal", "Osaka", "Nairobi", "Tallinn"),
     "turns": ("My sister moved to {v} in the spring for her new job.",
               "I'm flying out to see my sister in {v}, she relocated there this year."),
     "direct": ("Which city did {n}'s sister move to?",),
     "para": ("Where does {n}'s sibling live these days?",)},
    {"kind": "allergy", "values": ("shellfish", "peanuts", "sesame", "kiwi fruit"),
     "turns": ("Just so you know, I'm allergic to {v}, so skip those recipes.",
               "Careful with the menu, {v} gives me a bad allergic reaction."),
     "direct": ("What is {n} allergic to?",),
     "para": ("Which food makes {n} ill and must be avoided when cooking?",)},
    {"kind": "job", "values": ("a pediatric nurse", "a structural engineer", "a high school "
                               "chemistry teacher", "a sommelier", "an air traffic controller"),
     "turns": ("I work as {v}, the shifts are long but I love it.",
               "After ten years I'm still {v}, it pays the bills."),
     "direct": ("What does {n} work as?",),
     "para": ("What is {n}'s profession?", "How does {n} earn a living?")},
    {"kind": "car", "values": ("Volvo estate", "Subaru Outback", "Toyota Prius", "Fiat Panda"),
     "turns": ("The {v} broke down on the motorway again this morning.",
               "I bought a second-hand {v} from my neighbour."),
     "direct": ("Which car broke down for {n}?", "What did {n} buy from the neighbour?"),
     "para": ("What vehicle does {n} drive?",)},
    {"kind": "hobby", "values": ("bouldering", "pottery", "sourdough baking", "birdwatching",
                                 "salsa dancing"),
     "turns": ("I signed up for a {v} class on Thursday evenings.",
               "Spent the whole Saturday on {v}, my favourite way to unwind."),
     "direct": ("Which class did {n} sign up for on Thursday evenings?",),
     "para": ("What does {n} do to relax in free time?", "What is {n}'s pastime?")},
    {"kind": "diet", "values": ("vegetarian", "vegan", "pescatarian"),
     "turns": ("I've been {v} for about three years now.",
               "Remember I'm {v} when you suggest restaurants."),
     "direct": ("How long has {n} been {v}?",),
     "para": ("Does {n} eat meat?", "What are {n}'s eating habits?")},
    {"kind": "birthday", "values": ("March 3rd", "July 19th", "October 30th", "January 8th"),
     "turns": ("My birthday is on {v}, I'm planning a small dinner.",
               "Turning forty on {v}, can't believe it."),
     "direct": ("When is {n}'s birthday?",),
     "para": ("On what date was {n} born?", "When should we send {n} a card?")},
    {"kind": "language", "values": ("Portuguese", "Japanese", "Finnish", "Swahili", "Polish"),
     "turns": ("I'm taking {v} lessons twice a week before the trip.",
               "My tutor says my {v} pronunciation is improving."),
     "direct": ("Which lessons is {n} taking twice a week?",),
     "para": ("What tongue is {n} studying?", "What is {n} learning to speak?")},
    {"kind": "injury", "values": ("sprained ankle", "broken wrist", "torn ligament in the knee"),
     "turns": ("I can't run at the moment, I have a {v} from football.",
               "The physio says my {v} needs six more weeks."),
     "direct": ("What did the physio say about {n}'s injury?",),
     "para": ("Why is {n} not exercising lately?", "Is {n} hurt?")},
    {"kind": "kid_school", "values": ("Willowbrook Primary", "St. Anne's", "Riverside Academy"),
     "turns": ("My son just started at {v}, he cried on the first day.",
               "Parents' evening at {v} is next Tuesday."),
     "direct": ("Where did {n}'s son start?",),
     "para": ("Which school does {n}'s child attend?", "Where is {n}'s boy educated?")},
    {"kind": "move_house", "values": ("a flat near the harbour", "a cottage outside town",
                                      "a loft in the old brewery"),
     "turns": ("We're moving into {v} at the end of the month.",
               "Boxes everywhere, the move into {v} is next week."),
     "direct": ("When is {n} moving into the new place?",),
     "para": ("Where will {n}'s new home be?", "What kind of residence is {n} relocating to?")},
)

SMALL_TALK = ("Morning! How are you today?", "Thanks, that was really helpful.",
              "Can you remind me what we talked about last time?", "Haha, fair enough.",
              "The weather has been awful all week.", "I'm a bit tired, long day.",
              "Let's pick this up tomorrow.", "Could you make that shorter?",
              "Good point, I hadn't thought of that.", "What would you suggest for dinner?",
              "I watched a documentary about octopuses last night.",
              "Do you know any good podcasts?", "Ok, next question.", "That sounds right.",
              "Can you help me write an email to my landlord?", "I need to plan my week.")
REPLIES = ("Happy to help with that.", "Here is a short summary of the options.",
           "Sure, I can draft that for you.", "That makes sense, let's go step by step.",
           "Noted. Anything else you'd like to add?", "Here are three ideas you could try.",
           "Of course, take your time.", "I'd suggest starting with the simplest option.",
           "Good question: it depends on your budget.", "I've kept that in mind.")


def build(seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    names = [f"{f} {last}" for f in FIRST for last in LAST]
    rng.shuffle(names)
    turns: list[dict[str, object]] = []
    questions: list[dict[str, object]] = []
    evidence: list[tuple[str, str, dict[str, object], str]] = []  # (turn key, name, fact, value)
    for conv in range(40):
        name = names[conv]  # unique per conversation; first names repeat, so questions
        first = name  # name the user in full
        facts = rng.sample(FACTS, 10)
        slots = sorted(rng.sample(range(0, 50, 2), 10))  # user turns are the even ones
        for i in range(50):
            key = f"c{conv:03d}-t{i:02d}"
            if i % 2:
                text = rng.choice(REPLIES)
                speaker = "assistant"
            elif i in slots:
                fact = facts[slots.index(i)]
                value = rng.choice(fact["values"])  # type: ignore[arg-type]
                text = rng.choice(fact["turns"]).format(v=value)  # type: ignore[attr-defined]
                speaker = name
                evidence.append((key, first, fact, value))
            else:
                text = rng.choice(SMALL_TALK)
                speaker = name
            turns.append({"key": key, "conversation": f"conv-{conv:03d}", "turn": i,
                          "speaker": speaker, "text": f"{speaker}: {text}"})
    # 300 questions about 300 of the 400 evidence turns; 40% direct, 60% paraphrase.
    picked = rng.sample(evidence, 300) if len(evidence) >= 300 else evidence
    for n, (key, first, fact, value) in enumerate(picked):
        kind = "direct" if n % 5 < 2 else "paraphrase"
        forms = fact["direct" if kind == "direct" else "para"]
        q = rng.choice(forms).format(n=first, v=value)  # type: ignore[attr-defined]
        questions.append({"query": q, "answers": [key], "kind": kind, "fact": fact["kind"]})
    return {"about": "generated user/assistant dialogue; see make_dialogue_set.py", "seed": seed,
            "turns": turns, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    data = build(args.seed)
    Path(args.out).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                              encoding="utf-8")
    print(f"{len(data['turns'])} turns, {len(data['questions'])} questions -> {args.out}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
