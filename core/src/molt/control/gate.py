"""The safety gate on learned text: every text that would reach a prompt is screened before replay and
again before canary.

Molt turns users' corrections into memories, skills and harness edits that every later request of the
agent carries in its system prompt, so every user is a potential author of the agent's instructions.
Replay cannot catch an injected instruction: it asks whether the answer now says what the correction
said, and an instruction the model obeys passes that by construction. The gate therefore judges the
*form* of the text against what its kind of text may be:

=====================  ==================================================================================
``memory``             a declarative fact about the world the agent serves — no imperative, nothing
                       addressed to the model
``skill``              a procedure over the agent's own tools — imperatives are its form, but only over
                       tools the agent offers, and never about the model's role or instructions
``harness``            a requirement on the answer (format, citation, unit, language) — not an order
                       to the model about its role, behaviour or other instructions
``tool_description``   what a tool or parameter does — usage advice, but nothing about the model's role
``tool_name``          an identifier and nothing else
=====================  ==================================================================================

What it reads is the statement's **form** (mood: an imperative; grammatical person: a second-person
subject; deontic modals, standing-order adverbs such as "always", "never", "from now on") and its
**addressee** (the model — "you", "the assistant", "the AI" — its instructions, or every user the agent
talks to, against the world the agent serves). Both are read through closed word classes — pronouns,
modal verbs, quantifiers, nouns naming a model and its instructions, verbs of speaking and of obeying —
in ten languages (English, German, French, Spanish, Italian, Portuguese, Dutch, Russian, Chinese,
Japanese), not through a list of attack phrases: a paraphrase keeps its form and addressee, whatever its
words.

Before anything is read, the text is normalised the way an attacker would have to undo it: NFKC (full-
width and compatibility forms), format characters (zero-width spaces and joiners, soft hyphens, bidi
marks) dropped, look-alike letters of other scripts folded to Latin inside Latin words, digits used as
letters (``1gn0re``) folded, letters spaced apart (``i g n o r e``) joined, casing folded. Encoded
payloads — base64, URL percent-encoding, HTML entities, ``\\x``/``\\u`` escapes — are refused as such
(a fact about the world does not need an encoding) and what they decode to is screened as well, so the
reasons say what the payload said. Links are refused; secrets and credentials are found with the
project's detectors (:mod:`molt.governance.redaction.credentials`). A text that orders a call to a tool
the agent does not offer, or that contradicts the operator's own system prompt (the same statement with
the opposite polarity), is refused.

The verdict is typed (:class:`Verdict`: ``accepted`` and the ``reasons``); the plane logs a refused
candidate with its reasons and flags the feedback behind it (:func:`flagged_feedback` reads the flags
back for the console).

One module at ~700 lines because it is one idea: the word classes and the rules over them are read
together (a rule names the classes it combines, and a class exists only for the rules that use it). The
text they are matched on is normalised and decoded first (:mod:`molt.control.gate_text`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from molt.control.gate_text import decoded_payloads, normalize

__all__ = ["ROLES", "Form", "SafetyGate", "Verdict", "flagged_feedback", "gate_context", "normalize", "read_form"]

Role = Literal["memory", "skill", "harness", "tool_description", "tool_name"]
ROLES: tuple[str, ...] = ("memory", "skill", "harness", "tool_description", "tool_name")


class Verdict(BaseModel):
    """The gate's answer on one text (or one candidate): ``accepted``, else the ``reasons``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accepted: bool
    reasons: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, reasons: Iterable[str]) -> Verdict:
        rs = list(dict.fromkeys(r for r in reasons if r))
        return cls(accepted=not rs, reasons=rs)

    def __bool__(self) -> bool:  # a verdict reads as "passed"
        return self.accepted

    def summary(self) -> str:
        return "accepted" if self.accepted else "; ".join(self.reasons)



# ---------------------------------------------------------------------------------------------- word classes
# Closed classes of ten languages (and the two verb classes the gate cares about). Each entry is a word
# or a short fixed form of the language's grammar; matching is on word boundaries in the normalised text
# (substrings for Chinese and Japanese, which do not separate words).

_SECOND_PERSON = {
    "you", "your", "yours", "yourself", "yourselves", "youre", "you're", "u", "ur", "thou", "thee", "thy",
    "du", "dich", "dir", "dein", "deine", "deinen", "deinem", "deiner", "euch", "euer", "eure",
    "tu", "toi", "ton", "ta", "tes", "vous", "votre", "vos",
    "tú", "ti", "usted", "ustedes", "vosotros", "vosotras", "os", "tus", "vuestro", "vuestra",
    "tuo", "tua", "tuoi", "voi", "vostro", "vostra",
    "você", "vocês", "teu", "tua", "teus", "tuas",
    "jij", "jou", "jouw", "uw",
    "ты", "тебя", "тебе", "тобой", "твой", "твоя", "твои", "вы", "вас", "вам", "ваш", "ваша", "ваши",
}
_SECOND_PERSON_CJK = ("你", "您", "あなた", "君は", "お前")

_MODEL_NOUNS = (
    r"assistant|a\.?i\.?|ai assistant|chat ?bot|bot|llm|language model|ai model|gpt|chatgpt|"
    r"system prompt|system message|prompt|jailbreak|the agent|this agent|"
    r"developer mode|dan mode|"
    r"assistent|ki|sprachmodell|systemprompt|"
    r"ia|modèle de langage|modèle|asistente|modelo de lenguaje|modelo|assistente|modello|"
    r"ассистент|помощник|ии|бот|модель|нейросеть"
)
_MODEL_CJK = ("助手", "人工智能", "语言模型", "模型", "系统提示", "アシスタント", "言語モデル", "プロンプト", "ボット")

_INSTRUCTION_NOUNS = (
    r"instructions?|prompts?|directives?|guidelines?|guardrails?|rules?|programming|commands?|"
    r"anweisungen|anweisung|instruktionen|regeln|vorgaben|befehle|"
    r"consignes|règles|directives|"
    r"instrucciones|reglas|indicaciones|órdenes|"
    r"istruzioni|regole|direttive|"
    r"instruções|regras|diretrizes|"
    r"instructies|regels|"
    r"инструкции|инструкций|инструкциям|указания|указаний|правила|правил|команды"
)
_INSTRUCTION_CJK = ("指令", "指示", "规则", "提示词", "命令", "ルール", "指図")

#: Words that place instructions before or above this text ("previous", "the above", "system").
_PRIOR = (
    r"previous|prior|above|earlier|preceding|original|initial|old|existing|other|all|any|system|"
    r"vorherigen?|vorigen?|bisherigen?|obigen?|alle|allen|"
    r"précédentes?|antérieures?|toutes|"
    r"anteriores?|previas?|todas|"
    r"precedenti|tutte|"
    r"vorige|eerdere|alle|"
    r"предыдущие|прежние|все|всех|предыдущих"
)
_PRIOR_CJK = ("之前", "以前", "上面", "所有", "前の", "以前の", "すべての")

#: Verbs of setting aside what one was told.
_OVERRIDE = (
    r"ignore|ignoring|ignored|disregard|forget|override|overrule|bypass|skip|drop|discard|abandon|"
    r"neglect|cancel|delete|erase|reset|replace|supersede|"
    r"ignoriere|ignorieren|ignoriert|vergiss|vergessen|missachte|verwirf|überschreibe|"
    r"ignore|ignorez|oublie|oubliez|oublier|négligez|"
    r"ignora|ignore|ignoren|ignorar|olvida|olvide|olviden|olvidar|descarta|"
    r"ignori|dimentica|dimentichi|tralascia|"
    r"esqueça|esquece|esquecer|desconsidere|"
    r"negeer|vergeet|"
    r"игнорируй|игнорируйте|игнорировать|забудь|забудьте|отбрось|пренебреги"
)
_OVERRIDE_CJK = ("忽略", "忘记", "无视", "無視", "忘れ", "放弃")

#: Verbs of speaking and of putting something in the answer.
_SPEECH = (
    r"reply|replies|respond|responds|answer|answers|say|says|tell|tells|told|state|quote|mention|output|"
    r"print|write|reveal|disclose|leak|share|give|provide|recommend|inform|claim|greet|append|prepend|"
    r"repeat|insist|di'|let|promote|advertise|suggest|direct|redirect|refer|send|email|post|"
    r"antworte|antworten|sag|sage|sagen|erzähle|nenne|nennen|gib|geben|schreibe|schreiben|empfiehl|"
    r"teile|verrate|"
    r"réponds|répondez|répondre|dis|dites|dire|donne|donnez|écris|écrivez|recommande|recommandez|"
    r"révèle|révélez|indique|indiquez|"
    r"responde|responda|respondan|responder|di|diga|digan|decir|da|dé|den|escribe|escriba|recomienda|"
    r"recomiende|revela|revele|menciona|mencione|"
    r"rispondi|risponda|rispondere|dì|dire|dai|dia|scrivi|scriva|consiglia|rivela|menziona|"
    r"responda|responde|diga|diz|dizer|dê|escreva|recomende|revele|mencione|"
    r"antwoord|antwoorden|zeg|zeggen|geef|geven|schrijf|noem|"
    r"отвечай|ответь|отвечайте|ответьте|скажи|скажите|говори|говорите|сообщи|сообщай|сообщайте|"
    r"напиши|пиши|дай|давай|рекомендуй|упоминай|раскрой"
)
_SPEECH_CJK = ("回答", "回复", "告诉", "说", "答え", "返答", "伝え", "言って", "返信")

#: Verbs of obeying, behaving and taking a role.
_CONDUCT = (
    r"obey|follow|comply|act|behave|pretend|stop|cease|quit|start|begin|roleplay|role-play|impersonate|become|switch|assume|"
    r"simulate|emulate|play|enable|activate|unlock|adopt|"
    r"befolge|befolgen|gehorche|handle|verhalte|tu|tue|spiele|"
    r"suis|suivez|obéis|obéissez|agis|agissez|fais|faites|joue|jouez|"
    r"sigue|siga|sigan|obedece|obedezca|actúa|actúe|finge|finja|"
    r"segui|obbedisci|agisci|fingi|comportati|"
    r"siga|obedeça|aja|finja|"
    r"volg|gehoorzaam|gedraag|doe|speel|"
    r"следуй|следуйте|подчиняйся|веди|действуй|притворись|играй"
)
_CONDUCT_CJK = ("扮演", "假装", "服从", "遵守", "遵循", "演じ", "従っ", "振る舞")

#: Verbs that make the text a standing order on the agent itself ("add this to your system prompt").
_SELF_EDIT = (
    r"add|insert|include|put|save|store|remember|memorize|keep|update|change|modify|set|"
    r"füge|hinzufügen|speichere|merke|ajoute|ajoutez|mémorise|retiens|añade|añada|agrega|guarda|recuerda|"
    r"aggiungi|memorizza|ricorda|adicione|acrescente|lembre|voeg|onthoud|добавь|добавьте|запомни|сохрани"
)

#: Deontic modals (obligation, prohibition) and the future of a standing order.
_MODAL = (
    r"must|mustn't|should|shouldn't|shall|have to|has to|need to|needs to|are to|is to|will|won't|ought to|"
    r"are required to|is required to|may not|cannot|can't|"
    r"musst|müssen|muss|sollst|sollen|soll|darfst|dürfen|wirst|werden|"
    r"dois|doit|devez|doivent|devras|"
    r"debes|debe|deben|deberás|tienes que|tiene que|"
    r"devi|deve|devono|dovrai|"
    r"deves|deve|devem|tem que|tens de|"
    r"moet|moeten|zult|"
    r"должен|должна|должны|обязан|нужно|надо"
)
_MODAL_CJK = ("必须", "应该", "一定要", "なければ", "べき", "必ず")

#: Adverbs that make a statement a standing order.
_STANDING = (
    r"always|never|from now on|henceforth|going forward|from this point|at all times|in every|in all|"
    r"no matter what|regardless|without exception|forever|whatever|whenever|"
    r"immer|nie|niemals|stets|ab jetzt|von nun an|ab sofort|"
    r"toujours|jamais|désormais|dorénavant|à partir de maintenant|"
    r"siempre|nunca|jamás|de ahora en adelante|a partir de ahora|desde ahora|"
    r"sempre|mai|d'ora in poi|da ora in poi|"
    r"nunca|a partir de agora|de agora em diante|"
    r"altijd|nooit|vanaf nu|voortaan|"
    r"всегда|никогда|отныне|с этого момента|впредь"
)
_STANDING_CJK = ("总是", "永远", "始终", "从现在开始", "从现在起", "今後", "これから", "常に", "いつも", "決して")

#: Quantifiers that make the addressee everyone the agent talks to.
_ALL = (
    r"every|each|all|any|everyone|everybody|anyone|anybody|"
    r"jede[mnrs]?|alle[mn]?|jeder|chaque|tous|toutes|tout|cada|todos|todas|cualquier|ogni|tutti|tutte|"
    r"qualsiasi|qualquer|elke|iedere|alle|каждому|каждый|всем|все|любому"
)
_AUDIENCE = (
    r"users?|customers?|clients?|visitors?|callers?|people|persons?|person|one|shoppers?|buyers?|guests?|"
    r"requests?|conversations?|chats?|messages?|questions?|queries|inquiries|"
    r"kunden|kunde|nutzer|benutzer|anfragen?|clients|utilisateurs?|demandes?|clientes?|usuarios?|"
    r"consultas?|utenti|richieste|usuários?|pedidos|klanten|klant|gebruikers?|vragen|"
    r"клиентам|клиенту|пользователям|пользователю|запросы|запрос"
)
#: Pronouns of everyone ("everyone", "whoever asks").
_EVERYONE = (r"everyone|everybody|anyone|anybody|whoever|whomever|jeder|jedermann|alle welt|tout le monde|"
             r"quiconque|todo el mundo|cualquiera|chiunque|ognuno|toda a gente|todo mundo|iedereen|wie dan ook|"
             r"каждому|всем|любому|кто угодно")
_AUDIENCE_CJK = ("所有人", "大家", "任何人", "全員", "誰にでも", "所有用户", "每个用户", "每位客户", "所有客户", "每个客户", "全てのユーザー", "すべてのユーザー",
                 "全てのお客様", "すべてのお客様", "全員")

#: Words that claim the model's identity or role ("you are now", "act as").
_ROLE = (
    r"you are|you're|you will be|you are now|act as|acting as|pretend to be|pretend you|roleplay as|your role|"
    r"your purpose|your job|your task|your goal|your name|your persona|your identity|"
    r"du bist|sie sind jetzt|deine rolle|tu es|vous êtes|ton rôle|votre rôle|eres|usted es|tu papel|su papel|"
    r"sei|il tuo ruolo|você é|tu és|seu papel|jij bent|je bent|jouw rol|ты|вы теперь|твоя роль|ваша роль"
)
_ROLE_CJK = ("你是", "您是", "你现在是", "あなたは", "君は", "お前は")

#: Fillers an imperative may start behind ("please", "also", "and", "now").
_LEAD = (
    r"be sure to|make sure to|make sure that|make sure you|remember to|don't forget to|do not forget to|"
    r"take care to|be certain to|be careful to|feel free to|"
    r"please|kindly|also|and|then|now|just|simply|so|ok|okay|important|note|ps|p\.s\.|"
    r"bitte|auch|und|jetzt|s'il vous plaît|s'il te plaît|aussi|et|maintenant|por favor|también|y|ahora|"
    r"per favore|anche|e|ora|adesso|também|agora|alsjeblieft|alstublieft|ook|en|nu|"
    r"пожалуйста|также|и|теперь|сейчас"
)

#: Negation (polarity), for the contradiction test.
_NEGATION = re.compile(
    r"\b(?:not|no|never|don't|do not|doesn't|does not|mustn't|must not|cannot|can't|won't|without|none|nothing|"
    r"nicht|kein|keine|nie|niemals|ne|pas|jamais|no|nunca|non|mai|niet|geen|nooit|не|нет|никогда)\b")

_STOP = frozenset("""a an the and or but if then of to in on at by for with from as is are was were be been being it its
this that these those there here than so such do does did done have has had can could may might must should shall
will would not no never always only all any each every our your their his her my we you they he she i me us them
about into over under after before also very more most less least some same other own just""".split())


def _rx(words: str) -> re.Pattern[str]:
    # a word ends at a space or punctuation, not at a hyphen ("follow-up" is not "follow")
    return re.compile(rf"(?<![\w'-])(?:{words})(?![\w'-])", re.I)


_R_MODEL, _R_INSTR, _R_PRIOR = _rx(_MODEL_NOUNS), _rx(_INSTRUCTION_NOUNS), _rx(_PRIOR)
_R_OVERRIDE, _R_SPEECH, _R_CONDUCT = _rx(_OVERRIDE), _rx(_SPEECH), _rx(_CONDUCT)
_R_SELF_EDIT, _R_MODAL, _R_STANDING = _rx(_SELF_EDIT), _rx(_MODAL), _rx(_STANDING)
_R_ROLE, _R_LEAD = _rx(_ROLE), _rx(_LEAD)
_R_AUDIENCE = re.compile(rf"(?<![\w'])(?:{_AUDIENCE})(?![\w'])", re.I)
#: A passive of speaking ("are to be told", "must be sent", "should be informed"): with the people the
#: agent talks to as its subject, what they are to be told is a standing order on every answer.
_R_TOLD = re.compile(
    r"(?<![\w'])(?:should|must|shall|will|are to|is to)\s+(?:always\s+|only\s+)?(?:hear|learn)\b|"
    r"(?<![\w'])(?:be|been|are|is|get|gets|werden|wird|être|sont|ser|son|essere|sono|worden|быть)\s+"
    r"(?:\w+\s+)?(?:told|informed|sent|directed|redirected|referred|quoted|given|shown|offered|recommended|"
    r"advised|instructed|asked|mitgeteilt|gesagt|informiert|geschickt|informés|dits|envoyés|informados|"
    r"enviados|informati|inviati|geïnformeerd|gestuurd)(?![\w'])", re.I)
#: The model called by name at the head of a sentence (the vocative: "Assistant, …", "AI: …", "Bot -").
_R_VOCATIVE = re.compile(rf"^\W*(?:dear\s+|hey\s+|hi\s+|note\s+(?:to|for)\s+(?:the\s+)?)?(?:{_MODEL_NOUNS})\s*[,:!\-–—]",
                         re.I)
#: A chat-role header: the text poses as another turn of the conversation.
_R_CHAT_ROLE = re.compile(
    r"(?:^|\n|[.!?]\s+)\W*(?:system|developer|admin|administrator|operator|root|sudo|assistant|user|human|"
    r"instruction|instructions|override|system note|system message)\s*(?:\]|>|:|\)|#)|<\|?\s*im_start|"
    r"\[/?\s*(?:inst|sys|system|admin)\s*\]|<<\s*sys|###\s*(?:system|instruction)", re.I)
#: What every answer must say: the answer as the subject of a deontic modal and a verb of saying what
#: (not how: citing, the unit, the language and the format are requirements on the answer).
_R_ANSWER_CONTENT = re.compile(
    r"(?<![\w'])(?:answers?|repl(?:y|ies)|responses?|messages?|outputs?)\b[^.;]{0,40}?\b(?:must|should|shall|has to|"
    r"have to|needs? to|is to|are to|will|always)\s+(?:\w+\s+)?(?:say|tell|mention|recommend|claim|promote|advertise|"
    r"reveal|disclose|quote|praise|suggest|point to|refer to|link to|direct|redirect|send)\b", re.I)
#: Chinese and Japanese request forms ("…てください", "请…"): an imperative wherever it stands.
_IMPERATIVE_CJK = ("ください", "なさい", "しろ", "请", "務必", "务必", "不要", "别再")
_R_ALL_AUDIENCE = re.compile(
    rf"(?<![\w'])(?:(?:{_ALL})(?:\s+\w+){{0,2}}\s+(?:{_AUDIENCE})|{_EVERYONE})(?![\w'])", re.I)
_R_INSTR_PRIOR = re.compile(
    rf"(?<![\w'])(?:(?:{_PRIOR})(?:\s+[\w'-]+){{0,2}}\s+(?:{_INSTRUCTION_NOUNS})|"
    rf"(?:{_INSTRUCTION_NOUNS})\s+(?:\w+\s+){{0,2}}(?:{_PRIOR}))(?![\w'])", re.I)
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*", re.U)
_SENTENCES = re.compile(r"(?<=[.!?;。！？\n])\s*|\s+[-–—]\s+")
#: A short label ahead of a colon ("Output format:", "Note:"): a heading, not a clause with a verb.
_LABEL = re.compile(r"^\s*([^\W\d_][\w'-]*(?:\s+[\w'-]+){0,2})\s*:\s+")
_CLAUSES = re.compile(r",\s*|:\s+|\s+(?:and|then|but|und|dann|et|puis|y|luego|e|poi|en|и|а)\s+|[，、]")

_LINK = re.compile(
    r"(?:\b[a-z][a-z0-9+.-]{1,15}://\S+|\bwww\.\S+|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|net|org|io|ai|co|info|biz|"
    r"xyz|top|ru|cn|de|fr|uk|us|me|app|dev|link|site|online|club|ly|gg|tk|to|sh|cc)(?:/\S*)?\b|"
    r"\[[^\]]*\]\([^)]*\)|\bbit\.ly/\S+)", re.I)
_TOOL_CALL_SYNTAX = re.compile(
    r"\"?(?:tool_calls?|function_call|tool_use)\"?\s*[:=]|\{\s*\"name\"\s*:|<\s*/?\s*(?:tool|function)[_ ]?call|"
    r"\b([a-z_][a-z0-9_]*)\((?:[^()]{0,200})\)", re.I)
_TOOL_VERB = re.compile(
    r"(?<![\w])(?:call|calls|calling|invoke|invoking|use|using|run|running|execute|executing|trigger|triggering|"
    r"aufrufen|rufe|appelle|appelez|utilise|utilisez|llama|llame|usa|use|chiama|usa|chame|roep|gebruik|"
    r"вызови|вызовите|используй)"
    r"\s+(?:the\s+|a\s+|an\s+|den\s+|die\s+|das\s+|le\s+|la\s+|l'|el\s+|lo\s+|il\s+|o\s+|de\s+)?"
    r"(?:(?:tool|function|api|endpoint|werkzeug|funktion|outil|fonction|herramienta|función|strumento|funzione|"
    r"ferramenta|função|functie|инструмент|функцию)\s+)?"
    r"[`'\"]?([a-z][a-z0-9]*(?:[_.][a-z0-9]+)+|(?-i:[a-z]{2,}[A-Z][a-z]{2,}[A-Za-z0-9]*))[`'\"]?", re.I)
_TOOL_NOUN = re.compile(r"[`'\"]?([a-z][a-z0-9]*(?:[_.][a-z0-9]+)+)[`'\"]?\s+(?:tool|function|api|endpoint)\b", re.I)


@dataclass(frozen=True)
class Form:
    """The form and addressee of one sentence (see the module docstring)."""

    imperative: bool  # a clause starts with an imperative verb (of speaking, obeying, overriding, self-editing)
    second_person: bool  # the model is addressed as "you" (any of the ten languages)
    model_addressed: bool  # a noun naming a model, assistant, bot or prompt
    instructions: bool  # a noun naming instructions, rules or a prompt
    prior_instructions: bool  # instructions placed before or above this text ("previous instructions")
    override: bool  # a verb of setting aside (ignore, forget, disregard)
    speech: bool  # a verb of speaking or of putting something in the answer
    conduct: bool  # a verb of obeying, behaving, taking a role
    self_edit: bool  # a verb of adding to or changing what the agent keeps
    modal: bool  # a deontic modal (must, should, have to, will)
    standing: bool  # a standing-order adverb (always, never, from now on)
    everyone: bool  # a quantified audience (every user, all customers, each request)
    role: bool  # a claim on the model's identity or role ("you are", "act as", "your role")

    audience: bool = False  # the people the agent talks to, as a plural (users, customers, callers)
    told: bool = False  # a passive of speaking with them as recipients ("are to be told", "should be sent")
    imperative_of: frozenset[str] = frozenset()  # the classes of the imperative verbs (speech, conduct, …)
    vocative: bool = False  # the sentence opens by calling the model ("Assistant, …", "AI: …")
    chat_role: bool = False  # a chat-role header ("System:", "[ADMIN]", "<|im_start|>system")
    answer_content: bool = False  # what every answer must say ("the reply has to say …", "answers must mention …")

    @property
    def directive(self) -> bool:
        """The sentence orders something (an imperative or a deontic modal)."""
        return self.imperative or self.modal


def _has(rx: re.Pattern[str], cjk: Sequence[str], s: str) -> bool:
    return bool(rx.search(s)) or any(w in s for w in cjk)


def _imperative(clause: str) -> str | None:
    """Whether ``clause`` (normalised) is an imperative of the classes the gate reads: its first word
    behind fillers and standing-order adverbs is a verb of speaking, obeying, overriding or self-editing
    in its bare form — or a Chinese / Japanese clause led by one. Returns the verb's class, or ``None``."""
    c = clause.strip(" \t\"'“”‘’«»()[]*#>-•:")
    while True:
        m = _R_LEAD.match(c) or _R_STANDING.match(c)
        if not m or m.end() == 0:
            break
        c = c[m.end():].lstrip(" ,:!-")
    if c.startswith(("do not ", "don't ", "dont ", "never ", "nicht ", "ne ", "no ", "не ")):
        c = c.split(" ", 2)[-1] if c.startswith("do not ") else c.split(" ", 1)[-1]
    for cls, rx in (("speech", _R_SPEECH), ("conduct", _R_CONDUCT), ("override", _R_OVERRIDE),
                    ("self_edit", _R_SELF_EDIT)):
        m = rx.match(c)
        if m:
            w = m.group(0)
            # "answers to …", "replies are …": an English plural noun or third person, not a bare verb
            if len(w) > 4 and w.endswith("s") and (rx.fullmatch(w[:-1]) or rx.fullmatch(w[:-3] + "y")):
                return None
            rest = c[m.end():m.end() + 12]
            # "answer is ...", "rules are ..." — the word is the subject noun of a statement, not a verb
            if re.match(r"\s+(?:is|are|was|were|has|have|will|must|should|can|of|for|ist|sind|est|sont|es|son|è|é|"
                         r"são|zijn|—|-)\b", rest):
                return None
            return cls
    for cls, words in (("override", _OVERRIDE_CJK), ("speech", _SPEECH_CJK), ("conduct", _CONDUCT_CJK)):
        if any(c.startswith(w) for w in words):
            return cls
    return "speech" if any(c.startswith(w) for w in ("不要", "别", "请", "永远", "总是", "必ず", "常に")) else None


def read_form(sentence: str) -> Form:
    """The :class:`Form` of one (normalised) sentence."""
    s = sentence
    words = set(_WORD.findall(s))
    label = _LABEL.match(s)
    body = s[label.end():] if label else s
    clauses = [c for c in _CLAUSES.split(body) if c.strip()]
    moods = {m for m in (_imperative(c) for c in clauses or [body]) if m}
    return Form(
        imperative=bool(moods) or any(w in s for w in _IMPERATIVE_CJK),
        imperative_of=frozenset(moods | ({"speech"} if any(w in s for w in _IMPERATIVE_CJK) else set())),
        second_person=bool(words & _SECOND_PERSON) or any(w in s for w in _SECOND_PERSON_CJK),
        model_addressed=_has(_R_MODEL, _MODEL_CJK, s),
        instructions=_has(_R_INSTR, _INSTRUCTION_CJK, s),
        prior_instructions=bool(_R_INSTR_PRIOR.search(s)) or (any(w in s for w in _PRIOR_CJK)
                                                              and any(w in s for w in _INSTRUCTION_CJK)),
        override=_has(_R_OVERRIDE, _OVERRIDE_CJK, s),
        speech=_has(_R_SPEECH, _SPEECH_CJK, s),
        conduct=_has(_R_CONDUCT, _CONDUCT_CJK, s),
        self_edit=bool(_R_SELF_EDIT.search(s)),
        modal=_has(_R_MODAL, _MODAL_CJK, s),
        standing=_has(_R_STANDING, _STANDING_CJK, s),
        everyone=bool(_R_ALL_AUDIENCE.search(s)) or any(w in s for w in _AUDIENCE_CJK),
        role=_has(_R_ROLE, _ROLE_CJK, s),
        audience=bool(_R_AUDIENCE.search(s)),
        vocative=bool(_R_VOCATIVE.match(s)),
        chat_role=bool(_R_CHAT_ROLE.search(s)),
        answer_content=bool(_R_ANSWER_CONTENT.search(s)),
        told=bool(_R_TOLD.search(s)),
    )


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s and s.strip()]


def _form_reasons(f: Form, role: str) -> list[str]:
    """Why a sentence of this form may not be a text of ``role`` (empty: it may)."""
    out: list[str] = []
    if f.chat_role:
        out.append("poses as a chat-role header (System:, [ADMIN], <|im_start|>): another turn of the conversation")
    if f.vocative:
        out.append("addresses the model by name (the vocative: 'Assistant, …')")
    if f.answer_content:
        out.append("a standing order on what every answer says")
    if f.instructions and (f.override or f.prior_instructions or f.second_person):
        out.append("refers to the model's instructions (sets aside or rewrites what the model was told)")
    if f.role or (f.second_person and (f.conduct or f.override)):
        out.append("addresses the model's role or identity")
    if f.model_addressed and (f.directive or f.speech or f.conduct or f.second_person):
        out.append("addresses the model (names the assistant, the AI or its prompt)")
    if f.second_person and f.directive and (f.speech or f.conduct or f.override or f.self_edit):
        out.append("orders the model in the second person")
    if (f.everyone and f.speech and (f.directive or role != "memory" or f.second_person)) or (
            f.audience and f.told and f.modal):
        out.append("a standing order on what to tell every user")
    elif f.standing and f.speech and (f.directive or f.second_person):
        out.append("a standing order on how the model replies ('always/never reply …')")
    if f.override and f.directive:
        out.append("orders the model to set something aside")
    if f.self_edit and f.imperative and (f.instructions or f.model_addressed or f.second_person):
        out.append("orders a change to the model's own prompt or memory")
    if role in ("skill", "tool_description") and f.imperative_of & {"speech", "conduct", "override"}:
        out.append("an imperative on how the model speaks or behaves: a skill is a procedure over the agent's tools")
    if role in ("memory", "harness", "tool_name") and f.imperative:
        out.append("an imperative: a memory must be a declarative fact about the world" if role == "memory"
                   else "an imperative: a harness edit may state a requirement on the answer, not order the model")
    if role == "harness" and f.second_person:
        out.append("addresses the model in the second person: a harness edit states a requirement on the answer")
    return out


def _polarity(s: str) -> bool:
    return bool(_NEGATION.search(s))


def _content(s: str) -> set[str]:
    return {w for w in _WORD.findall(s) if len(w) > 2 and w not in _STOP and not _NEGATION.fullmatch(w)}


def _contradiction(text: str, prompt: str) -> str | None:
    """A sentence of ``text`` that states one of ``prompt``'s sentences with the opposite polarity (their
    content words mostly shared, one negated and the other not), quoted; ``None`` when there is none."""
    for a in _sentences(text):
        ca = _content(a)
        if len(ca) < 2:
            continue
        for b in _sentences(prompt):
            cb = _content(b)
            shared = ca & cb
            if len(shared) >= 2 and len(shared) >= 0.6 * min(len(ca), len(cb)) and _polarity(a) != _polarity(b):
                return f"contradicts the operator's system prompt ({b[:120]!r})"
    return None


def _default_detectors() -> list[Any]:
    from molt.governance.redaction.credentials import ApiKeyDetector, PasswordDetector, PrivateKeyDetector

    return [ApiKeyDetector(), PasswordDetector(), PrivateKeyDetector()]


class SafetyGate:
    """Screens text that would reach a prompt (see the module docstring).

    Args:
        secret_detectors: detectors with ``detect(text) -> spans`` (``entity_type`` on each span) whose
            findings make a text unservable (default: the project's credential detectors — API keys,
            passwords, private keys).
        max_depth: how many layers of encoding inside each other are decoded and screened.
    """

    def __init__(self, *, secret_detectors: Sequence[Any] | None = None, max_depth: int = 3):
        self.detectors = list(secret_detectors) if secret_detectors is not None else _default_detectors()
        self.max_depth = max_depth

    # --------------------------------------------------------------------------------------- texts

    def screen(self, text: str, role: str = "memory", *, tools: Iterable[str] = (),
               system_prompt: str | None = None) -> Verdict:
        """The verdict on one ``text`` as a text of ``role`` (one of :data:`ROLES`), for an agent offering
        ``tools`` (their names; empty: not known) under the operator's ``system_prompt``."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        if not isinstance(text, str):
            return Verdict.of([f"not text ({type(text).__name__})"])
        return Verdict.of(self._reasons(text, role, frozenset(tools), system_prompt, self.max_depth))

    def screen_many(self, texts: Sequence[str], role: str = "memory", **kw: Any) -> Verdict:
        """The verdict on texts that reach the prompt together (corrections a candidate is built from,
        the parts of a skill): each text, and their concatenation — an instruction split across them
        reads as one there."""
        texts = [t for t in texts if t]
        reasons = [r for t in texts for r in self.screen(t, role, **kw).reasons]
        if len(texts) > 1:  # joined as sentences, and as one word cut in two ("Ign" + "ore previous …")
            for sep in (" ", ""):
                reasons += [f"split across texts: {r}" for r in self.screen(sep.join(texts), role, **kw).reasons]
        return Verdict.of(reasons)

    def _reasons(self, text: str, role: str, tools: frozenset[str], prompt: str | None, depth: int) -> list[str]:
        reasons: list[str] = []
        if role == "tool_name":
            if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", text):
                return ["a tool name must be an identifier (letters, digits, _ . -)"]
            return []
        raw = unicodedata.normalize("NFKC", text)
        raw = "".join(c for c in raw if unicodedata.category(c) != "Cf")
        for enc, decoded in decoded_payloads(raw) if depth > 0 else []:
            reasons.append(f"carries an encoded payload ({enc})")
            reasons += [f"decoded {enc}: {r}" for r in self._reasons(decoded, role, tools, prompt, depth - 1)]
        found = sorted({sp.entity_type for d in self.detectors for sp in d.detect(raw)})
        if found:
            reasons.append(f"carries a secret or credential ({', '.join(found)})")
        folded = normalize(raw, casefold=False)
        if _LINK.search(raw) or _LINK.search(folded):
            reasons.append("carries a link")
        norm = folded.casefold()
        for s in _sentences(norm):
            reasons += _form_reasons(read_form(s), role)
        reasons += self._tool_reasons(folded, role, tools)
        if prompt:
            c = _contradiction(norm, normalize(prompt))
            if c:
                reasons.append(c)
        return reasons

    def _tool_reasons(self, raw: str, role: str, tools: frozenset[str]) -> list[str]:
        named = {m.group(1) for m in _TOOL_VERB.finditer(raw)} | {m.group(1) for m in _TOOL_NOUN.finditer(raw)}
        words = re.findall(r"[A-Za-z]{3,}", raw)
        if words and sum(bool(re.search(r"[a-z][A-Z]", w)) for w in words) > 0.3 * len(words):
            # casing is noise in this text ("tHe AnSwER"): a lower-to-upper turn names no camelCase tool
            named = {n for n in named if "_" in n or "." in n}
        calls = [m for m in _TOOL_CALL_SYNTAX.finditer(raw)]
        named |= {m.group(1) for m in calls if m.group(1)}
        out: list[str] = []
        if any(m.group(1) is None for m in calls):
            out.append("carries tool-call syntax (a serialised call)")
        if role == "memory" and any(m.group(1) for m in calls):
            out.append("carries a call expression: a memory is a fact, not a call")
        low = {t.casefold() for t in tools}
        foreign = sorted(n for n in named if n.casefold() not in low)
        if foreign:
            out.append(f"directs a call to {', '.join(foreign)}, which {'is' if len(foreign) == 1 else 'are'} not "
                       f"among the agent's tools" + ("" if tools else " (the agent offers none the gate knows)"))
        return out

    # --------------------------------------------------------------------------------------- candidates

    def screen_candidate(self, candidate: Any, *, tools: Iterable[str] = (), system_prompt: str | None = None,
                         live_system_prompt: str | None = None) -> Verdict:
        """The verdict on every text a control-plane candidate would put in a prompt.

        ``candidate`` is a :class:`molt.control.diagnose.Candidate`; ``tools`` are the agent's tool names;
        ``system_prompt`` the operator's own; ``live_system_prompt`` the live version's harness prompt
        (what a harness edit adds is the part of its prompt the live one lacks).
        """
        tools = frozenset(tools)
        kw: dict[str, Any] = {"tools": tools, "system_prompt": system_prompt}
        p: Mapping[str, Any] = candidate.payload or {}
        kind = candidate.kind
        if kind in ("rollback", "weight_update", "noop", "memory_retire"):
            return Verdict(accepted=True)  # no new text: a rollback restores a version that served
        if kind in ("memory_insert", "memory_update"):
            return self._field("memory", p.get("text"), "memory", **kw)
        if kind == "skill_patch":
            verdicts = [self._field("skill name", p.get("name"), "skill", **kw),
                        self._field("skill trigger", p.get("trigger"), "skill", **kw),
                        self._field("skill", p.get("instructions"), "skill", **kw)]
            reasons = [r for v in verdicts for r in v.reasons]
            parts = [p.get("name"), p.get("trigger"), p.get("instructions")]
            if all(isinstance(x, str) for x in parts):
                joined = self.screen(" ".join(parts), "skill", **kw)
                reasons += [f"skill (name, trigger and instructions together): {r}" for r in joined.reasons]
                if tools and not any(re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", parts[2], re.I) for t in tools):
                    reasons.append("skill: names none of the agent's tools (a skill is a procedure over them)")
            return Verdict.of(reasons)
        if kind == "harness_edit":
            if p.get("fixed_text"):
                return Verdict(accepted=True)  # a sentence the product writes, nothing learned in it
            new = self._added(p.get("system_prompt"), live_system_prompt)
            return self._field("harness edit", new, "harness", **kw)
        if kind == "tool_schema_edit":
            reasons = []
            # the names the edit itself introduces: the tool, its renamed target, the parameters it notes
            named = [p.get("tool"), p.get("rename"), p.get("new_name"), p.get("parameter"), *(p.get("parameters") or [])]
            kw["tools"] = tools | {x for x in named if isinstance(x, str)}
            for key in ("description", "note"):
                if p.get(key) is not None:
                    reasons += self._field(f"tool {key}", p.get(key), "tool_description", **kw).reasons
            for key in ("rename", "new_name"):
                if p.get(key) is not None:
                    reasons += self._field("tool rename", p.get(key), "tool_name", **kw).reasons
            parts = candidate.parts
            for name, rw in (parts.harness.tool_rewrites.items() if parts is not None else ()):
                if rw.description:
                    reasons += self._field(f"{name}'s description", rw.description, "tool_description", **kw).reasons
                for pname, spec in ((rw.parameters or {}).get("properties") or {}).items():
                    if isinstance(spec, Mapping) and isinstance(spec.get("description"), str):
                        reasons += self._field(f"{name}.{pname}", spec["description"], "tool_description",
                                               **kw).reasons
            return Verdict.of(reasons)
        return Verdict.of([f"unknown candidate kind {kind!r}: nothing unscreened reaches a prompt"])

    def _field(self, what: str, text: Any, role: str, **kw: Any) -> Verdict:
        if not isinstance(text, str) or not text.strip():
            return Verdict.of([f"{what}: empty or not text"])
        v = self.screen(text, role, **kw)
        return Verdict.of(f"{what}: {r}" for r in v.reasons)

    @staticmethod
    def _added(new: Any, live: str | None) -> Any:
        if not isinstance(new, str) or not live:
            return new
        return new.replace(live, " ").strip() or new


def flagged_feedback(log: Any, tenant_id: str, agent_id: str | None = None, *, limit: int = 50) -> list[dict[str, Any]]:
    """The feedback the gate refused, as the decision log recorded it: one row per refused candidate —
    ``{cycle_id, created_at, agent_id, kind, cluster, reasons, trajectories}``, newest first.
    ``log`` is a :class:`molt.control.log.DecisionLog`; the console reads this to flag the feedback."""
    out: list[dict[str, Any]] = []
    for d in log.list(tenant_id, agent_id, limit=limit):
        for r in d.rejected:
            gate = r.get("gate") if isinstance(r, Mapping) else None
            if not gate or gate.get("accepted", True):
                continue
            out.append({"cycle_id": d.cycle_id, "created_at": d.created_at, "agent_id": d.agent_id,
                        "kind": r.get("kind"), "cluster": r.get("cluster"), "reasons": list(gate.get("reasons") or []),
                        "trajectories": list(r.get("source_trajectories") or [])})
    return out


def gate_context(live: Any, window: Iterable[Any]) -> dict[str, Any]:
    """What the gate needs to know of an agent to screen its candidates: ``tools`` — the names of the
    tools it offers and calls in ``window`` (its :class:`~molt.control.signals.Episode` list) and the
    names ``live``'s tool rewrites give them — and ``system_prompt``, the operator's prompt as the live
    version serves it."""
    tools: set[str] = set()
    for e in window:
        tools.update(t.name for t in getattr(e, "tools", ()) if getattr(t, "name", None))
        for o in getattr(e, "offered_tools", ()) or ():
            fn = o.get("function") if isinstance(o, Mapping) and isinstance(o.get("function"), Mapping) else o
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                tools.add(fn["name"])
                # its parameters are names the agent knows too (a schema note says "use order_id")
                props = (fn.get("parameters") or {}).get("properties") if isinstance(fn.get("parameters"), Mapping) else None
                tools.update(k for k in (props or {}) if isinstance(k, str))
    harness = live.parts.effective_harness()
    for name, rw in harness.tool_rewrites.items():
        tools.add(name)
        tools.update(x for x in (rw.rename, rw.dispatch) if x)
    return {"tools": frozenset(tools), "system_prompt": harness.system_prompt}
